"""Hostile command lines and environments, run through the installed `infergate` as an
operator would: each is a usage error (exit 4) that names the option or variable, with no
traceback, no secret echoed and no node reached, in bounded time and memory (issue 26's
corpus; the plans' own is test_hostile_plans.py)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from selftest.suite import LAB_PLAN, closed_plan

INFERGATE = Path(sys.executable).parent / "infergate"
MEMORY_BYTES = 1 << 30  # a refusal needs ~60 MB; an unbounded read or a fork bomb hits this
WALL_S = 60  # the hard bound: the process group is killed past it
CPU_S = 15.0  # a refusal costs ~2 s of CPU (pytest's start-up); a busy machine cannot flake it
SECRET = "s3cr3t-hostile-key"
# variables a case may set: each starts unset, so the machine's own never leak in
READ_BY_THE_SUITE = (
    "INFERGATE_INVENTORY",
    "INFERGATE_API_KEY",
    "OPENAI_API_KEY",
    "PYTEST_TIMEOUT",
    "PYTEST_XDIST_AUTO_NUM_WORKERS",
    "PYTEST_ADDOPTS",
)
PYTEST = ("-p", "no:cacheprovider")  # the phases run pytest: no cache written into the folder


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]  # {plan}, {privileged}, {dir}, {fifo}, {big} name the files below
    says: tuple[str, ...]  # what the refusal must say, the option or variable first
    env: dict[str, str | bytes] = field(default_factory=dict)
    secret: str | None = None  # must not appear in any form in what it printed
    cwd: str = "{dir}"  # {ini}: a folder whose pytest.ini names a plan


def phase(
    *argv: str,
    says: tuple[str, ...],
    plan: str | None = "{plan}",
    env: dict[str, str | bytes] | None = None,
    secret: str | None = None,
    cwd: str = "{dir}",
) -> Case:
    """A phase's command line, the plan as one word after the phase (None: no --plan)."""
    given = () if plan is None else (f"--plan={plan}",)
    return Case((argv[0], *given, *argv[1:], *PYTEST), says, env or {}, secret, cwd)


CASES = {
    # `infergate plan check`: the plan named by a path that is no plan
    "inventory-directory": Case(
        ("plan", "check", "--plan={dir}"), ("--plan", ": not a regular file")
    ),
    "inventory-dev-zero": Case(
        ("plan", "check", "--plan=/dev/zero"), ("--plan /dev/zero: not a regular file",)
    ),
    "inventory-fifo": Case(("plan", "check", "--plan={fifo}"), ("--plan", ": not a regular file")),
    "inventory-missing": Case(
        ("plan", "check", "--plan=/nonexistent/plan.yaml"),
        ("--plan /nonexistent/plan.yaml: cannot read: No such file or directory",),
    ),
    "inventory-10-mb": Case(
        ("plan", "check", "--plan={big}"), ("--plan", ": larger than 1024 KiB")
    ),
    "inventory-terminal-escape": Case(
        ("plan", "check", "--plan=/nonexistent/\x1b[2J\x1b]0;owned\x07.yaml"),
        ("--plan /nonexistent/\\x1b[2J\\x1b]0;owned\\x07.yaml: cannot read",),
    ),
    "inventory-100k-path": Case(
        ("plan", "check", "--plan=/" + "a" * 100_000),
        ("--plan /aaaa", "... (100001 characters): cannot read: File name too long"),
    ),
    "inventory-env-non-utf8": Case(
        ("plan", "check"),
        ("--plan /nonexistent/\\udcff\\udcfe.yaml: cannot read",),
        env={"INFERGATE_INVENTORY": b"/nonexistent/\xff\xfe.yaml"},
    ),
    # an empty value from an unset shell variable must not fall back to another plan
    "inventory-empty-option": Case(
        ("plan", "check", "--inventory="),  # the alias: named as the option's own name
        ("--plan is empty: give the plan's path",),
        env={"INFERGATE_INVENTORY": "{plan}"},
    ),
    "inventory-env-empty": Case(
        ("plan", "check"),
        ("INFERGATE_INVENTORY is set but empty: give the plan's path, or unset it",),
        env={"INFERGATE_INVENTORY": ""},
    ),
    "down-inventory-empty": Case(
        ("down", "--plan=", "--all-runs"),
        ("--plan is empty",),
        env={"INFERGATE_INVENTORY": "{plan}"},
    ),
    "unknown-command": Case(("bogus",), ("argument command: invalid choice: 'bogus'",)),
    "unknown-plan-command": Case(
        ("plan", "bogus"), ("argument plan_command: invalid choice: 'bogus'",)
    ),
    "no-command": Case((), ("the following arguments are required: command",)),
    "plan-check-unknown-option": Case(
        ("plan", "check", "--plan={plan}", "--bogus"),
        ("unrecognized arguments: --bogus",),
    ),
    # the operator's policy on what a plan grants its containers
    "plan-check-forbid-privileged": Case(
        ("plan", "check", "--plan={privileged}", "--forbid-privileged"),
        ("--forbid-privileged: the plan", "engine.docker_args[2] asks for privileged"),
        secret=SECRET,
    ),
    "plan-check-allow-list-empty": Case(
        ("plan", "check", "--plan={privileged}", "--allow-privileged="),
        ("--allow-privileged: the plan", "--allow-privileged=privileged,mount:/"),
        secret=SECRET,
    ),
    "plan-check-allow-list-not-a-grant": Case(
        ("plan", "check", "--plan={plan}", "--allow-privileged=privileged,\x1b[2Jall"),
        ("--allow-privileged: '\\x1b[2Jall' is not a grant: write privileged, cap:NAME",),
    ),
    # the phases: pytest's own options and the suite's, refused before any node is reached
    "timeout-inf": phase("preflight", "--timeout=inf", says=("--timeout inf: a number",)),
    "timeout-nan": phase("preflight", "--timeout=nan", says=("--timeout nan: a number",)),
    "timeout-negative": phase("preflight", "--timeout=-1", says=("--timeout -1.0: a number",)),
    "timeout-env-not-a-number": phase(
        "preflight",
        says=("PYTEST_TIMEOUT abc: a number of seconds",),
        env={"PYTEST_TIMEOUT": "abc"},
    ),
    "timeout-env-1e309": phase(
        "preflight",
        says=("PYTEST_TIMEOUT 1e309: a number of seconds",),
        env={"PYTEST_TIMEOUT": "1e309"},
    ),
    "workers-100000": phase("preflight", "-n", "100000", says=("-n 100000: from 0 to ",)),
    "workers-env-100000": phase(
        "preflight",
        "-n",
        "auto",
        says=("-n auto with PYTEST_XDIST_AUTO_NUM_WORKERS=100000: from 0 to ",),
        env={"PYTEST_XDIST_AUTO_NUM_WORKERS": "100000"},
    ),
    "api-key-newline": phase(
        "smoke",
        f'--api-key={SECRET}"\nX-Injected: 1',
        says=("the API key from --api-key holds a space, a control character",),
        secret=SECRET,
    ),
    "api-key-env-quotes": phase(
        "smoke",
        says=("the API key from INFERGATE_API_KEY holds",),
        env={"INFERGATE_API_KEY": f"'{SECRET}\"\\\n"},
        secret=SECRET,
    ),
    "api-key-env-non-utf8": phase(
        "smoke",
        says=("the API key from OPENAI_API_KEY holds",),
        env={"OPENAI_API_KEY": SECRET.encode() + b"\xe9\xff"},
        secret=SECRET,
    ),
    "ca-bundle-dev-zero": phase(
        "smoke",
        "--ca-bundle=/dev/zero",
        says=("--ca-bundle /dev/zero: not a regular file",),
    ),
    "ca-bundle-not-pem": phase(
        "smoke",
        "--ca-bundle={plan}",
        says=("--ca-bundle", ": no CA certificate OpenSSL can load"),
    ),
    "preflight-forbid-privileged": phase(
        "preflight",
        "--forbid-privileged",
        says=("--forbid-privileged: the plan", "engine.docker_args[3] asks for mount:/"),
        plan="{privileged}",
        secret=SECRET,
    ),
    "preflight-inventory-empty-beside-ini": phase(
        "preflight",
        says=("--plan is empty: give the plan's path",),
        plan="",
        cwd="{ini}",
    ),
    "preflight-env-inventory-empty-beside-ini": phase(
        "preflight",
        says=("INFERGATE_INVENTORY is set but empty",),
        plan=None,
        env={"INFERGATE_INVENTORY": ""},
        cwd="{ini}",
    ),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The paths the cases name: the lab's plan on a closed port, the same with privileges
    and a secret, a folder, a FIFO, a 10 MB file, a folder whose ini names the plan, and an
    `ssh` that notes any call (no case may reach a node)."""
    folder = tmp_path_factory.mktemp("hostile-cli")
    plan = closed_plan(folder)
    data = yaml.safe_load(plan.read_text())
    data["engine"]["docker_args"] = ["-e", f"HF_TOKEN={SECRET}", "--privileged", "-v", "/:/host"]
    privileged = folder / "privileged.yaml"
    privileged.write_text(yaml.safe_dump(data))
    os.mkfifo(folder / "fifo")
    (folder / "big").write_bytes(b"a" * 10_000_000)
    ini = folder / "ini"
    ini.mkdir()
    (ini / "pytest.ini").write_text(f"[pytest]\ninfergate_inventory = {plan}\n")
    shims = folder / "bin"
    shims.mkdir()
    (shims / "ssh").write_text(f'#!/bin/sh\necho "$*" >> {folder}/ssh-called\nexit 255\n')
    (shims / "ssh").chmod(0o755)
    paths = {"plan": plan, "privileged": privileged, "fifo": folder / "fifo"}
    paths |= {"big": folder / "big", "ini": ini, "dir": folder, "bin": shims}
    return {name: str(path) for name, path in paths.items()}


def filled(text: str, files: dict[str, str]) -> str:
    return text.format(**files) if "{" in text and "}" in text else text


def environment(case: Case, files: dict[str, str]) -> dict[bytes, bytes]:
    """This process's environment, as bytes, without the variables the suite reads, with the
    case's own and the noting `ssh` first on PATH."""
    env = {k: v for k, v in os.environb.items() if k.decode() not in READ_BY_THE_SUITE}
    env[b"PATH"] = f"{files['bin']}{os.pathsep}".encode() + env[b"PATH"]
    for name, value in case.env.items():
        env[name.encode()] = value if isinstance(value, bytes) else filled(value, files).encode()
    return env


def bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def run(case: Case, files: dict[str, str]) -> tuple[int, str, float]:
    """The exit status, what it printed and the CPU seconds it took; past WALL_S its whole
    process group is killed and the test fails."""
    argv = [str(INFERGATE), *(filled(a, files) for a in case.argv)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with subprocess.Popen(
        argv,
        cwd=filled(case.cwd, files),
        env=environment(case, files),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=bounded,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=WALL_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"still running after {WALL_S} s: {argv[:4]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return proc.returncode, out.decode(errors="backslashreplace"), cpu


def test_the_corpus_has_at_least_20_cases() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input_is_a_usage_error_naming_it(name: str, files: dict[str, str]) -> None:
    case = CASES[name]
    reached = Path(files["dir"], "ssh-called")
    reached.unlink(missing_ok=True)  # a case of this worker's before
    started = time.monotonic()
    status, out, cpu = run(case, files)
    assert status == 4, out[-3000:]
    for words in case.says:
        assert filled(words, files) in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "INTERNALERROR" not in out, out[-3000:]
    assert not any(c in out for c in "\x1b\x07"), "a control character reached the terminal"
    assert len(out) < 5000, f"{len(out)} characters printed"
    if case.secret:
        assert case.secret[:6] not in out
    assert cpu < CPU_S, cpu
    assert not reached.exists(), f"a refused run reached for a node: {reached.read_text()}"
    assert time.monotonic() - started < WALL_S


def test_the_corpus_plans_load_but_for_what_each_case_refuses(files: dict[str, str]) -> None:
    """The refusals are the cases' own: the same plans pass `plan check` untouched."""
    for plan in (files["plan"], files["privileged"], str(LAB_PLAN)):
        done = subprocess.run(
            [str(INFERGATE), "plan", "check", f"--plan={plan}"],
            capture_output=True,
            text=True,
            timeout=WALL_S,
            check=False,
        )
        assert done.returncode == 0, done.stderr
