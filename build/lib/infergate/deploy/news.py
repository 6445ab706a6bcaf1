"""What the nodes said, taken into the launch's watches and judged.

Each look takes in the streams' news, prints milestones as they are reached, and ends the
launch at once on a fatal line, a stopped container, a lost engine connection or an OOM
kill, on whichever node it was. After the launch, the same news says whether a rank lives.
"""

from __future__ import annotations

from docker.errors import NotFound

from infergate.deploy.failure import (
    exited,
    logs_remedy,
    lost_problem,
    oom_problem,
    watch_problems,
)
from infergate.deploy.state import LaunchState
from infergate.deploy.watch import (
    NodeWatch,
    Process,
    apply_event,
    apply_inspect,
    behind,
    last_said,
    oom_command,
    parse_oom_kills,
    parse_top,
    scan,
)
from infergate.engines.launch import Gate
from infergate.problems import Problem
from infergate.remote.docker_api import API_ERRORS, engine_said
from infergate.remote.fanout import each

SETTLE_S = 3.0  # after a Traceback line, how long its cause may take to follow
LOG_END_S = 2.0  # after a container stopped, for the rest of its log to arrive
QUERY_S = 30.0  # a dmesg grep: it answers within a second


def refresh(s: LaunchState) -> None:
    """Take in what every node said since the last look; print milestones as they are
    reached; fail on a fatal line or a stopped container, or on the kernel's OOM kill
    behind it, on whichever node it was."""
    take_news(s)
    for node in list(s.lost):
        judge_lost(s, node)
    started = s.started()
    if stopped := [n for n in started if s.watches[n].state != "running"]:
        # a stopped container's last lines say why: read them before judging
        for node in stopped:
            s.streams.finish_log(node, LOG_END_S)
        take_news(s)
    now = s.elapsed()
    troubled = {n: p for n in started if (p := watch_problems(s.watches[n], now, SETTLE_S))}
    if troubled:
        judge_oom(s)
        first = next(iter(troubled))
        s.fail({first: troubled[first]})


def take_news(s: LaunchState) -> None:
    """Apply the news waited for and what came since to the watches, hidden; say each
    milestone reached, and keep the lost streams for `judge_lost`."""
    news, s.news = [*s.news, *s.streams.drain()], []
    at = s.elapsed()
    for item in news:
        watch = s.watches[item.node]
        if item.lost:
            s.lost.setdefault(item.node, []).append(item)
            continue
        if item.line is None:
            apply_event(watch, item.event)
            continue
        line = s.hide(item.line)
        watch.lines.append(line)
        for name in scan(s.launch, watch, item.node, [line], at):
            s.say(f"[{at:6.1f} s] {s.where(item.node)}: {name}")
            s.heartbeat.said(at)


def judge_lost(s: LaunchState, node: str) -> None:
    """A stream of NODE ended before the launch closed it. A log that ended because its
    container stopped is judged as an exit; a lost event stream, a log of a container still
    running, or an inspection that fails mean the engine's connection is lost: fail now."""
    lost = s.lost.pop(node)
    found = "; ".join(n.lost for n in lost)
    if all(n.lost_log for n in lost):
        try:
            container = s.container(node)
            container.reload()
        except NotFound:
            s.watches[node].state = "missing"
            return
        except API_ERRORS as e:
            found += f"; its inspection failed too: {engine_said(e)}"
        else:
            apply_inspect(s.watches[node], container.attrs)
            if s.watches[node].state != "running":
                return
    s.fail({node: [lost_problem(node, found)]})


def judge_oom(s: LaunchState) -> None:
    """Fail when the kernel OOM-killed a process in a started container: the cause of a
    dead rank, or of a silent one."""
    started = s.started()
    each(started, lambda node: read_oom(s, node))
    if killed := {n: [oom_problem(s.watches[n])] for n in started if s.watches[n].oom_kills}:
        s.fail(killed)


def read_oom(s: LaunchState, node: str) -> None:
    """What the kernel OOM-killed in NODE's container, into its watch."""
    watch = s.watches[node]
    if watch.container_id:
        found = s.io(node, oom_command(watch.container_id), QUERY_S).stdout
        watch.oom_kills = parse_oom_kills(found) or watch.oom_kills


def beat(s: LaunchState, gate: Gate) -> None:
    """While GATE waits, every HEARTBEAT_S: a line per node it waits on, with the node's
    last log line (already redacted), so a long weight load shows its progress."""
    at = s.elapsed()
    if not s.heartbeat.due(at):
        return
    for node in behind(gate, s.watches, s.head):
        said = last_said(s.watches[node].lines) or "nothing yet"
        s.say(f"[{at:6.1f} s] {s.where(node)}: waiting for {gate.name}; log: {said}")


def catch_up(s: LaunchState, node: str) -> NodeWatch:
    """The node's container state and log lines, with what the kernel OOM-killed in it."""
    take_news(s)
    read_oom(s, node)
    return s.watches[node]


def processes(s: LaunchState, node: str) -> list[Process]:
    """The processes of NODE's engine container (none when it is not running)."""
    try:
        return parse_top(s.container(node).top(ps_args="-o pid,args"))
    except API_ERRORS:
        return []


def rank_problems(s: LaunchState, node: str) -> list[Problem]:
    """A rank is alive when its container runs and every process it had when the API
    became ready still runs: /health on the head stays 200 after a worker died."""
    watch = catch_up(s, node)
    if watch.oom_kills:
        return [oom_problem(watch)]
    if watch.state != "running":
        running = "the engine container running since the launch"
        return [Problem(exited(watch), running, logs_remedy(watch))]
    now = {p.pid for p in processes(s, node)}
    gone = [p for p in s.ready_processes.get(node, []) if p.pid not in now]
    dead = "the rank is dead: redeploy, and read the evidence for why it died"
    alive = "every engine process of the rank alive"
    return [Problem(f"process {p.pid} gone since ready: {p.args[:120]}", alive, dead) for p in gone]
