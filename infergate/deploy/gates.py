"""The launch's gates, each waited for through waiting.wait_until until its deadline (counted
from the launch's start): a milestone every planned node logs, Ray's own list of the cluster,
the API answering on the head. Each look first refreshes what the handle watches, which
ends the wait at once on a fatal line or a stopped container; a gate past its deadline
fails with its own remedy (launch.py: the adapter set it). A gate that asks (`ray status`,
the API) asks at most once a POLL_S: the wait wakes on every log line, and an engine that
logs each request it answers (SGLang's access log of a 503 from /health_generate) would
otherwise be asked again at once, hundreds of times a second, through its warm-up."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infergate.deploy.failure import missed
from infergate.deploy.watch import missing, parse_ray_status
from infergate.engines.launch import ClusterJoined, Gate, HttpReady, Milestone
from infergate.plan.apikey import check_authorized
from infergate.waiting import Clock, WaitTimedOut, wait_until

if TYPE_CHECKING:
    from infergate.deploy.executor import Deployment

POLL_S = 1.0  # between two looks at `ray status` or the API (a log line wakes it earlier)
HTTP_PROBE_S = 5.0  # one GET of the readiness gate: a server that is up answers at once


def wait_for(d: Deployment, gate: Gate) -> None:
    """Wait for GATE; past its deadline, fail naming the nodes not there and their state."""
    clock = Clock(gate.deadline, d.started_at)
    asked = Asked()
    try:
        wait_until(lambda: look(d, gate, asked), gate.name, clock, POLL_S, d.wait_for_news)
    except WaitTimedOut as e:
        d.judge_oom()  # a rank the kernel killed is silent: say why
        d.fail(missed(gate, d.watches, d.head, e.last, d.elapsed()), gate.name)


@dataclass
class Asked:
    """When a gate that asks last asked, and what it saw then."""

    at: float | None = None
    seen: str = "not asked yet"

    def due(self, now: float) -> bool:
        return self.at is None or now - self.at >= POLL_S


def look(d: Deployment, gate: Gate, asked: Asked) -> tuple[bool | None, str]:
    """One look at GATE: (True when passed, else None; what was seen, in words); a gate that
    still waits says so now and then (the heartbeat). The logs are read at every look, the
    cluster or the API asked only when ASKED says it is due, or at the deadline."""
    d.refresh()
    seen: tuple[bool | None, str]
    if isinstance(gate, Milestone):
        behind = missing(gate, d.watches)
        seen = (None, f"{', '.join(behind)} not past it") if behind else (True, "passed")
    elif asked.due(now := d.elapsed()) or now >= gate.deadline.seconds:
        asked.at = now
        seen = cluster_joined(d, gate) if isinstance(gate, ClusterJoined) else http_ready(d, gate)
        asked.seen = seen[1]
    else:
        seen = (None, asked.seen)
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
