"""The failure text of a launch: what each node showed, against what was planned, with a
remedy, and the last log lines of every node (what an operator reads first).

Pure: it reads what the watch saw (watch.py's `NodeWatch`) and says it; the launch's state
(state.py) raises it, redacted.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from infergate.deploy.stacks import WAITS
from infergate.deploy.watch import NodeWatch, error_lines, last_said, missing
from infergate.engines.launch import Gate, Launch, Milestone
from infergate.problems import Problem, describe_all

TAIL_LINES = 8  # per node, under the problems


class LaunchFailed(Exception):
    """The launch stopped: the message names the nodes, found against planned, a remedy,
    and the last log lines of every node."""


def failure_text(
    launch: Launch,
    watches: dict[str, NodeWatch],
    where: dict[str, str],
    problems: dict[str, list[Problem]],
    at: str,
    elapsed_s: float,
    evidence: Path | None,
    stacks: Sequence[str] = (),
) -> str:
    """The whole message: the heading (the gate it stopped at, when), each node's problems
    (with the nodes still behind the first milestone not every node reached), where each
    rank waits (STACKS, forensics.py), the tails."""
    problems = {**problems, **behind(launch, watches, problems)}
    heading = f"launch of {launch.engine} (run {launch.run_id}) failed"
    text = [f"{heading}{f' at `{at}`' if at else ''} after {elapsed_s:.1f} s:"]
    text += [describe_all(where[n], p) for n, p in problems.items()]
    if stacks:
        text += [WAITS, *[f"  {line}" for line in stacks]]
    text.append(tails(watches, where))
    if evidence:
        text.append(f"evidence: {evidence}")
    return "\n".join(text)


def missed(
    gate: Gate, watches: dict[str, NodeWatch], head: str, last: str, elapsed_s: float
) -> dict[str, list[Problem]]:
    """GATE's deadline passed: for a milestone, every node not past it, in its own state;
    for the cluster and the API, the head with the last state seen."""
    if isinstance(gate, Milestone):
        short = missing(gate, watches)
        remedy = gate.remedy_for([watches[n].lines for n in short])
        planned = f"every rank past `{gate.name}` within {gate.deadline}"
        problems: dict[str, list[Problem]] = {}
        for n in short:
            found = f"no `{gate.name}` line after {elapsed_s:.0f} s ({state(watches[n])})"
            problems[n] = [Problem(found, planned, retry_remedy(watches[n], remedy))]
        return problems
    found = f"{last} after {elapsed_s:.0f} s"
    return {head: [Problem(found, f"{gate.name} within {gate.deadline}", gate.remedy)]}


def behind(
    launch: Launch, watches: dict[str, NodeWatch], named: dict[str, list[Problem]]
) -> dict[str, list[Problem]]:
    """The other nodes still short of the first milestone not every node reached: a head
    that gave up waiting cannot say which worker it waited for."""
    gate = next((m for m in launch.milestones if missing(m, watches)), None)
    if gate is None:
        return {}
    planned = f"`{gate.name}` within {gate.deadline}"
    problems: dict[str, list[Problem]] = {}
    for n in [n for n in missing(gate, watches) if n not in named]:
        found = f"not past `{gate.name}` ({state(watches[n])})"
        problems[n] = [Problem(found, planned, retry_remedy(watches[n], gate.remedy))]
    return problems


def tails(watches: dict[str, NodeWatch], where: dict[str, str]) -> str:
    """Each node's error lines and last log lines: what an operator reads first."""
    parts = []
    for node, watch in watches.items():
        last = watch.last_lines(TAIL_LINES)
        errors = [ln for ln in error_lines(watch.lines) if ln not in last]
        body = [*errors, "..."] if errors else []
        body += last or [f"(no log: {state(watch)})"]
        parts.append(f"--- {where[node]} {watch.container}:\n" + "\n".join(body))
    return "\n".join(parts)


def unreached(launch: Launch, watches: dict[str, NodeWatch]) -> dict[str, list[Problem]]:
    """Per node, the milestones planned for it that its log never showed."""
    problems: dict[str, list[Problem]] = {}
    for m in launch.milestones:
        for node in missing(m, watches):
            found, planned = f"no `{m.name}` line in its log", f"`{m.name}` on every planned node"
            remedy = "read the node's log in the evidence directory"
            problems.setdefault(node, []).append(Problem(found, planned, remedy))
    return problems


def watch_problems(watch: NodeWatch, elapsed_s: float, settle_s: float) -> list[Problem]:
    """What ends the launch on this node now: a kernel OOM kill, a fatal line (a generic one
    once SETTLE_S passed for its cause to follow, or the container stopped), a stopped
    container."""
    if watch.oom_kills:
        return [oom_problem(watch)]
    stopped = watch.state != "running"
    settled = not watch.fatal or not watch.fatal.generic or elapsed_s > watch.fatal_at + settle_s
    if watch.fatal and (stopped or settled):
        return [fatal_problem(watch)]
    if stopped:
        return [Problem(exited(watch), "the engine container running", logs_remedy(watch))]
    return []


def oom_problem(watch: NodeWatch) -> Problem:
    found = f"the kernel OOM-killed {', '.join(watch.oom_kills)} in {watch.container}"
    remedy = (
        "free the node's memory (`pytest -m preflight -k memory` names what holds it) "
        "or plan a smaller KV cache"
    )
    return Problem(found, "the engine fits in the node's memory", remedy)


def lost_problem(node: str, found: str) -> Problem:
    """A stream of NODE's engine ended while the launch watched it (FOUND: which, on what):
    its dockerd restarted, or the SSH connection its socket goes through dropped. Nothing more
    would be heard from the node: the launch ends now, not at the gate's deadline."""
    remedy = (
        f"if its engine restarted, `sudo systemctl status docker` and `sudo journalctl -u "
        f"docker` on {node} say why; if the SSH connection dropped, check the link and "
        f"`ssh -O check {node}`; then launch again"
    )
    return Problem(found, "the node's Docker engine answering through the launch", remedy)


def fatal_problem(watch: NodeWatch) -> Problem:
    """What the node's most specific fatal line means, with its remedy."""
    assert watch.fatal is not None
    found = f"{watch.fatal.meaning}: {clipped(watch.fatal_line)}"
    return Problem(found, "no fatal line in the engine's log", watch.fatal.remedy)


def clipped(line: str, width: int = 300) -> str:
    """LINE within WIDTH characters, its start and its end: c10d and Python put the cause
    last ("... (errno: 101 - Network is unreachable)")."""
    if len(line) <= width:
        return line
    half = (width - 5) // 2
    return f"{line[:half]} ... {line[-half:]}"


def exited(watch: NodeWatch) -> str:
    if watch.state == "missing":
        return f"container {watch.container} gone"
    oom = ", OOM-killed" if watch.oom_killed else ""
    return f"container {watch.container} {watch.state} (exit code {watch.exit_code}{oom})"


def logs_remedy(watch: NodeWatch) -> str:
    return f"read `docker logs {watch.container}` and `dmesg` on the node (or the evidence)"


def retry_remedy(watch: NodeWatch, remedy: str) -> str:
    """The remedy for a node short of a milestone: its retry line's, where it logged one (the
    cause it shows), else REMEDY."""
    return watch.retrying.remedy if watch.retrying else remedy


def state(watch: NodeWatch) -> str:
    """Where a node short of a milestone is: its container, and what it still retries or
    the last thing it logged."""
    if not watch.started:
        return "its container was never started"
    if watch.retrying:
        retry = f"{watch.retrying.meaning}: {clipped(watch.retrying_line)}"
        return f"container {watch.state}, still retrying: {retry}"
    last = last_said(watch.lines)[:160] or "nothing logged"
    return f"container {watch.state}, last line: {last}"
