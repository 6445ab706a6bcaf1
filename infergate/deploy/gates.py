"""The launch's gates: a milestone every planned node logs, Ray's list of the cluster, the
API answering on the head, each waited for until its deadline from the launch's start.

Each look first refreshes the watches, so a fatal line or a stopped container ends the wait
at once; a gate past its deadline fails with the remedy its adapter set. A gate that asks
(`ray status`, the API) asks at most once a POLL_S (docs/deploy-and-inference.md#gate-polling).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from infergate.deploy.api import HttpAnswer
from infergate.deploy.failure import logs_remedy, missed
from infergate.deploy.forensics import take_stacks
from infergate.deploy.news import beat, judge_oom, refresh
from infergate.deploy.state import LaunchState
from infergate.deploy.watch import missing, parse_ray_status
from infergate.engines.launch import ClusterJoined, Gate, HttpReady, Milestone
from infergate.plan.apikey import check_authorized
from infergate.problems import Problem
from infergate.remote.docker_api import API_ERRORS, engine_said
from infergate.waiting import Clock, WaitTimedOut, wait_until

POLL_S = 1.0  # between two asks of `ray status` or the API
HTTP_PROBE_S = 5.0  # one GET of the readiness gate: a server that is up answers at once


def wait_for(s: LaunchState, gate: Gate) -> None:
    """Wait for GATE; past its deadline, fail naming the nodes not there and their state."""
    clock = Clock(gate.deadline, s.started_at)
    asked = Asked()
    try:
        wait_until(lambda: look(s, gate, asked), gate.name, clock, POLL_S, s.wait_for_news)
    except WaitTimedOut as e:
        # a rank the kernel killed is silent: say why
        judge_oom(s)
        at_s = s.elapsed()
        problems = missed(gate, s.watches, s.head, e.last, at_s)
        # before the teardown: where each rank hangs (forensics.py)
        s.fail(problems, gate.name, take_stacks(s), at_s)


@dataclass
class Asked:
    """When a gate that asks last asked, and what it saw then."""

    at: float | None = None
    seen: str = "not asked yet"

    def due(self, now: float) -> bool:
        return self.at is None or now - self.at >= POLL_S


def look(s: LaunchState, gate: Gate, asked: Asked) -> tuple[bool | None, str]:
    """One look at GATE: (True when passed, else None; what was seen, in words); a gate that
    still waits says so now and then (the heartbeat). The logs are read at every look, the
    cluster or the API asked only when ASKED says it is due, or at the deadline."""
    refresh(s)
    seen: tuple[bool | None, str]
    if isinstance(gate, Milestone):
        behind = missing(gate, s.watches)
        seen = (None, f"{', '.join(behind)} not past it") if behind else (True, "passed")
    elif asked.due(now := s.elapsed()) or now >= gate.deadline.seconds:
        asked.at = now
        seen = cluster_joined(s, gate) if isinstance(gate, ClusterJoined) else http_ready(s, gate)
        asked.seen = seen[1]
    else:
        seen = (None, asked.seen)
    if seen[0] is None:
        beat(s, gate)
    return seen


def cluster_joined(s: LaunchState, gate: ClusterJoined) -> tuple[bool | None, str]:
    status = parse_ray_status(exec_in(s, gate.node, gate.command))
    seen = f"{status.active} node(s) alive, {status.gpus:g} GPU(s) in `ray status`"
    if status.active < gate.nodes or status.gpus < gate.gpus:
        return None, seen
    s.say(f"[{s.elapsed():6.1f} s] {gate.name}: {seen}")
    return True, seen


def exec_in(s: LaunchState, node: str, argv: tuple[str, ...]) -> str:
    """ARGV run in NODE's engine container, to its end: what it printed (redacted); an
    engine that cannot run it ends the launch, in its own words."""
    try:
        output = s.container(node).exec_run(list(argv)).output
    except API_ERRORS as e:
        container, command = s.watches[node].container, shlex.join(argv)
        found = f"`{command}` in {container} failed: {s.hide(engine_said(e))}"
        planned = f"{command} answering in {container}"
        s.fail({node: [Problem(found, planned, logs_remedy(s.watches[node]))]})
    return s.hide(output.decode(errors="replace") if isinstance(output, bytes) else "")


def http_ready(s: LaunchState, gate: HttpReady) -> tuple[bool | None, str]:
    """Each path 200 (a 401 or 403 fails at once: waiting will not bring the key), and
    /v1/models listing the served name."""
    for path in gate.paths:
        answer = s.get(path, HTTP_PROBE_S)
        if refused := check_authorized(answer.status, s.launch.endpoint + path, s.api_key):
            s.fail({s.head: refused}, gate.name)
        if answer.status != 200:
            return None, f"GET {path}: {answer.status or answer.body}"
        if path == "/v1/models" and s.launch.served_name not in served_ids(answer.body):
            return None, f"/v1/models lists {served_ids(answer.body)}"
    s.say(f"[{s.elapsed():6.1f} s] {gate.name}: {', '.join(gate.paths)} answer")
    return True, "ready"


def served_ids(body: str) -> list[str]:
    """The model ids in a /v1/models answer."""
    try:
        return [str(m.get("id")) for m in json.loads(body).get("data", [])]
    except (ValueError, AttributeError):
        return []


def check_served(answer: HttpAnswer, served_name: str) -> list[Problem]:
    """/v1/models answered 200, listing SERVED_NAME."""
    listed = served_ids(answer.body)
    if answer.status == 200 and served_name in listed:
        return []
    found = f"GET /v1/models: {answer.status or answer.body}, models {listed}"
    remedy = "check --served-model-name in the launch and the head's log"
    return [Problem(found, f"200 listing {served_name!r}", remedy)]
