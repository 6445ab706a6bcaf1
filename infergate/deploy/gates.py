"""The launch's gates, each waited for through waiting.wait_until until its deadline (counted
from the launch's start): a milestone every planned node logs, Ray's own list of the cluster,
the API answering on the head. Each look first refreshes what the handle watches, which
ends the wait at once on a fatal line or a stopped container; a gate past its deadline
fails with its own remedy (launch.py: the adapter set it)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from infergate.apikey import check_authorized
from infergate.deploy.failure import missed
from infergate.deploy.launch import ClusterJoined, Gate, HttpReady, Milestone
from infergate.deploy.watch import missing, parse_ray_status
from infergate.waiting import Clock, WaitTimedOut, wait_until

if TYPE_CHECKING:
    from infergate.deploy.executor import Deployment

POLL_S = 1.0  # between two looks at `ray status` or the API (a log line wakes it earlier)
HTTP_PROBE_S = 5.0  # one GET of the readiness gate: a server that is up answers at once


def wait_for(d: Deployment, gate: Gate) -> None:
    """Wait for GATE; past its deadline, fail naming the nodes not there and their state."""
    clock = Clock(gate.deadline, d.started_at)
    try:
        wait_until(lambda: look(d, gate), gate.name, clock, POLL_S, d.wait_for_news)
    except WaitTimedOut as e:
        d.judge_oom()  # a rank the kernel killed is silent: say why
        d.fail(missed(gate, d.watches, d.head, e.last, d.elapsed()), gate.name)


def look(d: Deployment, gate: Gate) -> tuple[bool | None, str]:
    """One look at GATE: (True when passed, else None; what was seen, in words); a gate that
    still waits says so now and then (the heartbeat)."""
    d.refresh()
    if isinstance(gate, Milestone):
        behind = missing(gate, d.watches)
        seen: tuple[bool | None, str] = (
            (None, f"{', '.join(behind)} not past it") if behind else (True, "passed")
        )
    elif isinstance(gate, ClusterJoined):
        seen = cluster_joined(d, gate)
    else:
        seen = http_ready(d, gate)
    if seen[0] is None:
        d.beat(gate)
    return seen


def cluster_joined(d: Deployment, gate: ClusterJoined) -> tuple[bool | None, str]:
    status = parse_ray_status(d.exec_in(gate.node, gate.command))
    seen = f"{status.active} node(s) alive, {status.gpus:g} GPU(s) in `ray status`"
    if status.active < gate.nodes or status.gpus < gate.gpus:
        return None, seen
    d.say(f"[{d.elapsed():6.1f} s] {gate.name}: {seen}")
    return True, seen


def http_ready(d: Deployment, gate: HttpReady) -> tuple[bool | None, str]:
    """Each path 200 (a 401 or 403 fails at once: waiting will not bring the key), and
    /v1/models listing the served name."""
    for path in gate.paths:
        answer = d.get(path, HTTP_PROBE_S)
        if refused := check_authorized(answer.status, d.launch.endpoint + path, d.api_key):
            d.fail({d.head: refused}, gate.name)
        if answer.status != 200:
            return None, f"GET {path}: {answer.status or answer.body}"
        if path == "/v1/models" and d.launch.served_name not in served_ids(answer.body):
            return None, f"/v1/models lists {served_ids(answer.body)}"
    d.say(f"[{d.elapsed():6.1f} s] {gate.name}: {', '.join(gate.paths)} answer")
    return True, "ready"


def served_ids(body: str) -> list[str]:
    """The model ids in a /v1/models answer."""
    try:
        return [str(m.get("id")) for m in json.loads(body).get("data", [])]
    except (ValueError, AttributeError):
        return []
