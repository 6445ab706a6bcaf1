"""The suite's command-line options as one table, SUITE_OPTIONS: the pytest plugin declares
each (fixtures/plugin.py), and each `infergate` phase lists them in its help and passes them
on to pytest as they were given (add_suite_options). An option's name, value and help are
written here alone; this module imports no pytest, so `infergate preflight -h` lists them
without a plan.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from infergate.catalogue import TIERS
from infergate.deploy.runlock import MAX_WAIT_S as MAX_LOCK_WAIT_S
from infergate.inference.endpoint import endpoint_base
from infergate.inference.endpoint_gate import MAX_WAIT_S as MAX_ENDPOINT_WAIT_S
from infergate.plan.loader import PLAN_ENV, PLAN_OPTION
from infergate.remote.ssh_config import MAX_PERSIST_S, USER_CONFIG_OPTION

PLAN_ALIAS = "--inventory"  # the plan's first name; pytest-ansible declares it too
# an alias another installed plugin declares as well: argparse refuses the second declaration,
# and pytest calls each plugin's pytest_addoption as it registers, in no order to rely on
ANSIBLE_PLUGIN = "pytest-ansible"  # a distribution
TAKEN_BY = {PLAN_ALIAS: ANSIBLE_PLUGIN}
# pytest-ansible and testinfra's plugin declare the same options, and argparse stops any run
# that loads both (https://github.com/pytest-dev/pytest-testinfra/issues/58)
TESTINFRA_PLUGIN = "pytest11.testinfra"  # pytest-testinfra's entry point


@dataclass(frozen=True)
class Option:
    """One option of the suite: its names (the first its own, the rest aliases), how its value
    is read, and its help."""

    names: tuple[str, ...]
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    reader: Callable[[str], object] | None = None  # argparse's type: the value, checked
    default: object = None
    switch: bool = False  # takes no value (store_true)

    @property
    def name(self) -> str:
        return self.names[0]

    def arguments(self) -> dict[str, Any]:
        """The keywords that declare it, as argparse's add_argument and pytest's addoption
        take them."""
        if self.switch:
            return {"action": "store_true", "help": self.help}
        given: dict[str, Any] = {"metavar": self.metavar, "choices": self.choices}
        given |= {"type": self.reader, "default": self.default, "help": self.help}
        return {key: value for key, value in given.items() if value is not None}


def free_names(option: Option) -> tuple[str, ...]:
    """OPTION's names for pytest: without an alias that an installed plugin takes (TAKEN_BY)."""
    return tuple(n for n in option.names if n not in TAKEN_BY or not installed(TAKEN_BY[n]))


def installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


class PassOn(argparse.Action):
    """A suite option given to a phase: kept for pytest as one word under its own name, so
    that `--plan PATH` and `--inventory=PATH` both reach the plugin as --plan=PATH (two
    words would let pytest take PATH for a test path: docs/suite.md#the-plan-as-one-word)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        name = self.option_strings[0]
        word = name if self.nargs == 0 else f"{name}={values}"
        setattr(namespace, self.dest, [*getattr(namespace, self.dest), word])


def add_suite_options(run: argparse.ArgumentParser) -> None:
    """The suite's options in a phase's help, each passed on to pytest by PassOn (pytest reads
    the values; the choices are checked here too)."""
    group = run.add_argument_group("the suite's options, passed on to pytest")
    for option in SUITE_OPTIONS:
        given = option.arguments() | {"action": PassOn, "dest": "suite", "default": []}
        given |= {"nargs": 0} if option.switch else {"type": None}
        group.add_argument(*option.names, **given)


def seconds_up_to(text: str, most: float) -> float | None:
    """TEXT as seconds from 0 to MOST, or None: not a number, nan (which fails both
    comparisons), negative, or past MOST (inf, 1e309)."""
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if 0 <= seconds <= most else None


def endpoint_wait_s(text: str) -> float:
    """--endpoint-wait's value: seconds from 0 (one try) to MAX_WAIT_S, as the plan's key."""
    return seconds_option(text, MAX_ENDPOINT_WAIT_S)


def lock_wait_s(text: str) -> float:
    """--lock-wait's value: seconds from 0 to MAX_WAIT_S (a day)."""
    return seconds_option(text, MAX_LOCK_WAIT_S)


def seconds_option(text: str, most: float) -> float:
    """An option's seconds from 0 to MOST; inf, nan and the rest are a usage error that
    names the option (argparse adds its name)."""
    seconds = seconds_up_to(text, most)
    if seconds is None:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!a} is not a number of seconds from 0 to {most:g}"
        )
    return seconds


def persist_seconds(text: str) -> int:
    """--ssh-persist: whole seconds from 0 to MAX_PERSIST_S (ssh reads a negative one as
    an error of its config, and every node as unreachable)."""
    if not re.fullmatch(r"[0-9]{1,6}", text) or int(text) > MAX_PERSIST_S:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a whole number of seconds from 0 to {MAX_PERSIST_S}"
        )
    return int(text)


PLAN = Option(
    (PLAN_OPTION, PLAN_ALIAS),
    f"the deployment plan (YAML), written as {PLAN_OPTION}=PATH, before ${PLAN_ENV} and the ini "
    "key infergate_inventory; its deadlines set each test's timeout (the header's `infergate: "
    f"per-test timeouts` line); {PLAN_ALIAS}: its alias (pytest's only where pytest-ansible, "
    "which declares it too, is not installed)",
    metavar="PATH",
)
USER_CONFIG = Option(
    (USER_CONFIG_OPTION,),
    "your own ssh_config, read after the plan's Host blocks (default: $INFERGATE_SSH_CONFIG, "
    "else ~/.ssh/config; none: not read)",
    metavar="PATH",
)
FORBID = Option(
    ("--forbid-privileged",),
    "refuse a plan that grants its containers privileges (but --allow-privileged's)",
    switch=True,
)
ALLOW = Option(
    ("--allow-privileged",),
    "refuse every privilege the plan grants its containers but these, comma-separated "
    "(privileged, cap:NAME, device:PATH, mount:PATH, security-opt:..., user:root)",
    metavar="GRANTS",
)

SUITE_OPTIONS = (
    PLAN,
    Option(
        ("--ssh-persist",),
        f"keep SSH masters this long after the run for the next one (0: close them; at most "
        f"{MAX_PERSIST_S})",
        metavar="SECONDS",
        reader=persist_seconds,
        default=60,
    ),
    USER_CONFIG,
    Option(
        ("--model-hash",),
        "cached: hash only the model files changed since the last run; full: all (default: "
        "the level's: none at quick, cached at standard, full at full)",
        choices=("cached", "full"),
    ),
    Option(
        ("--level",),
        "quick: reachability, host facts, ports, image IDs, model file lists and sizes (no "
        "probe container, no hash); standard: every check (default, else the ini key "
        "infergate_level); full: and the full model hash",
        choices=TIERS,
    ),
    Option(
        ("--in-image",),
        "cached: reuse the engine's facts from an earlier run on this image, config and plan; "
        "fresh: read them again",
        choices=("cached", "fresh"),
        default="cached",
    ),
    Option(
        ("--shard-by",),
        "with xdist's workers (--tx, -n): each worker is the controller of a shard of the nodes "
        "and reads only its shard; the cluster tests run once all shards are done, on the "
        "shards' merged facts. plan: the node list cut into one slice per worker, in order; "
        "jump: the nodes behind one ssh.jump host together, the hosts dealt round the workers "
        "in the plan's order (give the --tx of each jump host's worker in that order)",
        choices=("plan", "jump"),
    ),
    Option(
        ("--lock-wait",),
        "how long to wait for another run's cluster lock before refusing (0: at once)",
        metavar="SECONDS",
        reader=lock_wait_s,
        default=60.0,
    ),
    FORBID,
    ALLOW,
    Option(
        ("--keep-deployment",),
        "leave the deployment running after the run (it prints how to stop it)",
        switch=True,
    ),
    Option(
        ("--endpoint",),
        "test an existing server (http://HOST:PORT or .../v1) and deploy nothing",
        metavar="URL",
        reader=endpoint_base,
    ),
    Option(
        ("--model",),
        "the served model name to test (default: the plan's model.served_name; with --endpoint "
        "and no plan, the one model GET /v1/models lists)",
        metavar="NAME",
    ),
    Option(
        ("--endpoint-wait",),
        "how long the inference phase waits for the endpoint to answer before its one request "
        "gates the rest (default: the plan's thresholds.endpoint_wait_s, 10)",
        metavar="SECONDS",
        reader=endpoint_wait_s,
    ),
    Option(
        ("--api-key",),
        "the bearer token every HTTP call sends (default: $INFERGATE_API_KEY, $OPENAI_API_KEY, "
        "then the plan's --api-key in engine.flags or VLLM_API_KEY)",
        metavar="KEY",
    ),
    Option(
        ("--ca-bundle",),
        "the CA bundle (PEM) an https endpoint is verified against, instead of certifi's",
        metavar="PATH",
    ),
    Option(
        ("--report-dir",),
        "the folder each run's report folder is made in, as DIR/<run id> (default: reports)",
        metavar="DIR",
    ),
    Option(
        ("--record-reference",),
        "record the parity reference (inference.parity's prompts) from what this run serves "
        "into PATH, a new file, instead of judging against one",
        metavar="PATH",
    ),
    Option(
        ("--update-baseline",),
        "write this run's tokens/s and TTFT as the plan's inference.baseline",
        switch=True,
    ),
)
