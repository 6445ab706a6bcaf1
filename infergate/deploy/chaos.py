"""Failure detection (issue 29 part 3), pure: the node commands of each chaos action, what
the head's probes saw after it, every rank's end state, and the judge of how soon a probe
noticed. fixtures/chaos.py strikes, polls and reads; docs/chaos.md says what each figure
means and what the lab found. Nothing here branches on the engine: its adapter names its
known issue and its better probe (Engine.blind_health)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from infergate.deploy.watch import Process
from infergate.plan.model import Chaos, ChaosAction
from infergate.problems import Problem

PROBES = ("health", "models", "generation")  # GET /health, GET /v1/models, a short completion
SHOWN = {"health": "/health", "models": "/v1/models", "generation": "a generation"}
DONE = {"kill": "`docker kill` of", "pause": "`docker pause` of", "cut": "a fabric cut on"}


@dataclass(frozen=True)
class Strike:
    """One action's commands on the struck node: `apply`, then `undo` whatever happened
    ("" where the run's removal undoes it: a killed container is removed with the run)."""

    action: ChaosAction
    apply: str
    undo: str


def strike(action: ChaosAction, container: str, interface: str, cut_s: float) -> Strike:
    """The commands of ACTION on a node whose engine container and fabric netdev are named."""
    c, i = shlex.quote(container), shlex.quote(interface)
    if action == "kill":
        return Strike(action, f"docker kill {c}", "")
    if action == "pause":
        return Strike(action, f"docker pause {c}", f"docker unpause {c} 2>/dev/null || true")
    # the node restores its own link: a controller that dies mid-cut leaves it cut N s only
    down_up = f"ip link set {i} down && sleep {cut_s:g}; ip link set {i} up"
    detached = f"nohup setsid sh -c {shlex.quote(down_up)} </dev/null >/dev/null 2>&1 &"
    return Strike(action, detached, f"ip link set {i} up")


@dataclass(frozen=True)
class Seen:
    """A probe's first failure after the strike: seconds after it, and what it answered."""

    at_s: float
    said: str


@dataclass(frozen=True)
class RankEnd:
    """A rank's state when the probes stopped: exited, paused, hung, partly dead, running."""

    where: str  # the node: name (address)
    state: str
    detail: str = ""  # the exit code, the processes gone


def rank_end(
    where: str, status: str, exit_code: int, gone: list[Process], serving: bool
) -> RankEnd:
    """A rank's end state from its container's status, the processes gone since ready and
    whether the cluster still generates: running but not generating is hung."""
    if status not in ("running", "paused"):
        return RankEnd(where, "exited", f"container {status}, exit code {exit_code}")
    if status == "paused":
        return RankEnd(where, "paused", "container paused, its processes frozen")
    if gone:
        names = ", ".join(f"{p.pid} {p.args[:40]}" for p in gone)
        return RankEnd(where, "partly dead", f"gone since ready: {names}")
    if not serving:
        return RankEnd(where, "hung", "every process alive, the cluster does not generate")
    return RankEnd(where, "running", "every process alive, the cluster generates")


@dataclass(frozen=True)
class Timeline:
    """What one action did: where, what each probe saw (None: did not notice within
    observe_s), what the requests in flight ended with, and every rank's end state."""

    action: ChaosAction
    where: str  # the struck node: name (address)
    observe_s: float
    noticed: Mapping[str, Seen | None]
    last: Mapping[str, str]  # each probe's last answer while it had not noticed
    load: tuple[str, ...]  # each request in flight: how it ended
    ranks: tuple[RankEnd, ...]

    def detect_s(self, probe: str) -> float | None:
        seen = self.noticed.get(probe)
        return None if seen is None else seen.at_s


def noticed_line(t: Timeline, probe: str) -> str:
    """`/health: noticed after 3.1 s (HTTP 500)` or `... did not notice in 60 s (last: 200)`."""
    seen = t.noticed.get(probe)
    if seen is None:
        return f"{SHOWN[probe]}: did not notice in {t.observe_s:g} s (last: {t.last.get(probe)})"
    return f"{SHOWN[probe]}: noticed after {seen.at_s:.1f} s ({seen.said[:120]})"


def describe(t: Timeline) -> str:
    """The timeline in a few lines: the action, each probe, the load, every rank's end."""
    lines = [f"after {DONE[t.action]} {t.where}'s rank:"]
    lines += [f"    {noticed_line(t, p)}" for p in PROBES]
    lines += [f"    request in flight: {said}" for said in t.load]
    lines += [f"    rank {r.where}: {r.state} ({r.detail})" for r in t.ranks]
    return "\n".join(lines)


@dataclass(frozen=True)
class Blind:
    """What an engine's /health is known to miss, and the probe that does not: its
    adapter's words (Engine.blind_health)."""

    issue: str  # the engine's issue where /health stays 200 after a rank died
    probe: str  # the probe that notices instead


def check_detection(t: Timeline, plan: Chaos, blind: Blind) -> list[Problem]:
    """The plan's gates on how soon the head's probes noticed the struck rank."""
    gates = [("health", plan.max_health_detect_s, "chaos.max_health_detect_s")]
    if plan.max_generation_detect_s is not None:
        gates.append(("generation", plan.max_generation_detect_s, "chaos.max_generation_detect_s"))
    return [
        Problem(
            f"{describe(t)}\n    so {SHOWN[probe]} {late(t, probe, limit)}",
            f"{SHOWN[probe]} failing within {limit:g} s of {DONE[t.action]} a rank ({key})",
            remedy(t, probe, blind),
        )
        for probe, limit, key in gates
        if (t.detect_s(probe) or float("inf")) > limit
    ]


def late(t: Timeline, probe: str, limit: float) -> str:
    seen = t.detect_s(probe)
    if seen is None:
        return f"stayed answering for {t.observe_s:g} s: a liveness probe on it misses this"
    return f"noticed only after {seen:.1f} s, past {limit:g} s"


def remedy(t: Timeline, probe: str, blind: Blind) -> str:
    """Where /health missed it: the engine's known issue and the probe that notices."""
    noticed = [SHOWN[p] for p in PROBES if t.detect_s(p) is not None]
    which = f" (here {', '.join(noticed)} noticed)" if noticed else ""
    if probe == "health":
        return (
            f"do not trust /health as the liveness probe on this engine and version "
            f"({blind.issue}): {blind.probe}{which}"
        )
    return f"watch every rank's container and processes (test_rank_is_alive){which}"


def to_dict(t: Timeline) -> dict[str, Any]:
    """The timeline for results.json (from_dict reads it back)."""
    data = asdict(t)
    data["detect_s"] = {p: t.detect_s(p) for p in PROBES}
    return data


def from_dict(data: Mapping[str, Any]) -> Timeline:
    noticed = {p: Seen(**s) if s else None for p, s in data["noticed"].items()}
    ranks = tuple(RankEnd(**r) for r in data["ranks"])
    fields = {k: data[k] for k in ("action", "where", "observe_s", "last")}
    return Timeline(**fields, noticed=noticed, load=tuple(data["load"]), ranks=ranks)
