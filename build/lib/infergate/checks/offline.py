"""Offline nodes: the engine loads everything from local paths, and where no node reaches the
model hub the plan says so (HF_HUB_OFFLINE=1), so that nothing waits on the hub at launch.
Which nodes reach it: a bounded TCP dial from each, in the host probe, to the endpoint the
engine would use (the env's HF_ENDPOINT, else huggingface.co) or to the env's HTTPS proxy.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from infergate.checks.facts import Sections, section_text
from infergate.checks.ports import dial_command, parse_dials
from infergate.plan.docker_args import Volume
from infergate.plan.model import flag_values, plan_key
from infergate.problems import Problem

HUB_DEFAULT = "https://huggingface.co"
# The dial's own deadline: a SYN answered or refused comes back in milliseconds, and one
# retransmission (at 1 s) is covered; a dropped one costs the probe this much, no more
HUB_DIAL_TIMEOUT_S = 2
# Name resolution happens before the dial's own timeout starts: all of it under `timeout`
HUB_SECTION_LIMIT_S = HUB_DIAL_TIMEOUT_S + 2
# The engines' flags that name a tokenizer (vLLM; SGLang)
TOKENIZER_FLAGS = ("--tokenizer", "--tokenizer-path")
ENV_KEY = plan_key("engine.env")


@dataclass(frozen=True)
class HubTarget:
    """The `endpoint` the engine would ask, and the host and port a dial must reach for it:
    the endpoint's own, or the proxy's."""

    endpoint: str
    host: str
    port: int


def hub_target(env: Mapping[str, str]) -> HubTarget:
    """The endpoint huggingface_hub would reach, and the host:port a dial must reach for it."""
    endpoint = env.get("HF_ENDPOINT") or HUB_DEFAULT
    via = env.get("HTTPS_PROXY") or env.get("https_proxy") or endpoint
    url = urlsplit(via if "://" in via else f"http://{via}")
    port = url.port or (443 if url.scheme == "https" else 80)
    return HubTarget(endpoint, url.hostname or "", port)


def hub_section(target: HubTarget) -> tuple[str, str]:
    """The probe section that dials the hub once, bounded."""
    dial = dial_command([(target.host, target.port)], HUB_DIAL_TIMEOUT_S)
    return ("hub-dial", f"timeout -k 1 {HUB_SECTION_LIMIT_S} {dial} || true")


def parse_hub_dial(text: str) -> str | None:
    """None when the dial connected (``huggingface.co:443 ok 0.4``), else what it said
    (``error ConnectionRefusedError [Errno 111] Connection refused``; nothing: ran past)."""
    said = next(iter(parse_dials(text).values()), "")
    return None if said.startswith("ok") else said.removeprefix("error ") or "no answer in time"


def offline_set(env: Mapping[str, str]) -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it (1, ON, YES, TRUE, any case)."""
    return env.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def hub_dial_of(sections: Sections) -> str | None:
    """Why this node's dial to the hub did not connect; None when it did."""
    return parse_hub_dial(section_text(sections, "hub-dial"))


def planned_sources(flags: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, value) of every tokenizer flag, `--flag value` or `--flag=value`."""
    return [(name, value or "") for name, value in flag_values(flags, *TOKENIZER_FLAGS)]


def check_sources_local(
    sources: Sequence[tuple[str, str]],
    model_path: str,
    volumes: Sequence[Volume],
    target: HubTarget,
    failed: str | None,
) -> list[Problem]:
    """Each tokenizer the flags name is a local path the container sees: a hub id is
    downloaded at every launch, and fails on a node that does not reach the hub (FAILED:
    why this node's dial did not connect, None when it did)."""
    problems = []
    seen = [model_path, *(v.target for v in volumes)]
    for flag, value in sources:
        if not value.startswith("/"):
            reach = f"this node {'does not reach' if failed else 'reaches'} {target.endpoint}"
            reach += f" ({failed})" if failed else ""
            local = f"{model_path.rstrip('/')}/tokenizer"
            problems.append(
                Problem(
                    found=f"{flag} {value}, a hub id ({reach})",
                    planned=f"{flag} a local path on every node",
                    remedy=f"download it once (`hf download {shlex.quote(value)} --local-dir "
                    f"{local}`), copy it to every node, then plan `{flag} {local}`",
                )
            )
        elif not any(value == p or value.startswith(p.rstrip("/") + "/") for p in seen):
            problems.append(
                Problem(
                    found=f"{flag} {value}, a path no mount brings into the container",
                    planned=f"{flag} under model.path ({model_path}) or a volume's target",
                    remedy=f"add `-v {value}:{value}:ro` to engine.docker_args",
                )
            )
    return problems


def check_offline_mode(
    failed: Mapping[str, str | None], offline: Mapping[str, bool], endpoint: str
) -> dict[str, list[Problem]]:
    """Where a node does not reach the hub (FAILED: by node, why its dial did not connect, or
    None), its env sets HF_HUB_OFFLINE=1 (OFFLINE, by node), so no library waits on it; the
    finding names ENDPOINT (the head's) and the nodes that do reach it."""
    reach = sorted(n for n, why in failed.items() if why is None)
    said = f"{', '.join(reach)} reach(es) it" if reach else "no node reaches it"
    return {
        node: [
            Problem(
                found=f"{endpoint} unreachable from this node ({why}), {said}, and "
                "HF_HUB_OFFLINE is not 1",
                planned="HF_HUB_OFFLINE=1 where the hub is out of reach (every model source "
                "is local)",
                remedy=f'set HF_HUB_OFFLINE: "1" in {ENV_KEY} (or in this node\'s env)',
            )
        ]
        for node, why in failed.items()
        if why is not None and not offline[node]
    }
