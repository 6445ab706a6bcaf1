"""Pure readers of what a launch shows on a node: its container's state and new log lines,
`ray status`, `docker top`; and the problems they mean."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infergate.engines.launch import ClusterJoined, Gate, Launch, Milestone
from infergate.engines.signatures import Signature


@dataclass
class NodeWatch:
    """What the controller has seen of one node's engine container so far."""

    container: str
    container_id: str = ""  # the kernel's OOM lines name it
    started: bool = False
    state: str = "not started"  # docker's State.Status, or "missing"
    exit_code: int = 0
    oom_killed: bool = False
    lines: list[str] = field(default_factory=list)
    reached: dict[str, float] = field(default_factory=dict)  # milestone -> seconds
    oom_kills: list[str] = field(default_factory=list)  # "VLLM::Worker_TP1 (pid 4711)"
    fatal: Signature | None = None  # the most specific fatal line seen: what it means
    fatal_line: str = ""
    fatal_at: float = 0.0  # seconds into the launch when the first one was seen
    retrying: Signature | None = None  # the last retry line seen (Signature.retrying)
    retrying_line: str = ""

    def last_lines(self, count: int = 12) -> list[str]:
        return self.lines[-count:]


def oom_command(container_id: str) -> str:
    """The kernel's OOM kills inside the container, from `dmesg`: Docker sends no oom event
    for a limit above the container (docs/deploy-and-inference.md#oom-kills)."""
    # the victim's cgroup (task_memcg), not the cpuset of the task that hit the limit
    kid = shlex.quote(container_id)
    return f"dmesg 2>/dev/null | grep -E 'oom-kill:.*task_memcg=[^,]*'{kid} || true"


def apply_inspect(watch: NodeWatch, attrs: dict[str, Any]) -> None:
    """Update WATCH from the Engine API's inspection of its container (`State`)."""
    state = attrs.get("State", {})
    watch.container_id = attrs.get("Id", watch.container_id)
    watch.state = state.get("Status", watch.state)
    watch.exit_code = int(state.get("ExitCode", watch.exit_code))
    watch.oom_killed = bool(state.get("OOMKilled", watch.oom_killed))


def apply_event(watch: NodeWatch, event: dict[str, Any]) -> None:
    """Update WATCH from an Engine API event about its container.

    Sample: ``{"Type": "container", "Action": "die", "Actor": {"ID": "88820cf2...",
    "Attributes": {"exitCode": "137", "name": "infergate-node2-...", ...}}, ...}``
    """
    actor = event.get("Actor", {})
    if actor.get("Attributes", {}).get("name") != watch.container:
        return
    action = event.get("Action", "")
    if action == "start":
        watch.state = "running"
    elif action == "die":
        watch.state, watch.exit_code = "exited", int(actor["Attributes"].get("exitCode", 0))
    elif action == "oom":
        watch.oom_killed = True
    elif action == "destroy":
        watch.state = "missing"


def scan(launch: Launch, watch: NodeWatch, node: str, new: list[str], at_s: float) -> list[str]:
    """Record milestones, the most specific fatal line in NEW (a Traceback's cause comes
    after it) and the last retry line; returns the milestones reached."""
    reached = []
    for line in new:
        for m in launch.milestones:
            if node in m.nodes and m.name not in watch.reached and m.reached_by(line):
                watch.reached[m.name] = at_s
                reached.append(m.name)
        if retrying := launch.retrying_in(line):
            watch.retrying, watch.retrying_line = retrying, line.strip()
        fatal = launch.fatal_in(line)
        if fatal and (watch.fatal is None or _rank(launch, fatal) < _rank(launch, watch.fatal)):
            watch.fatal_at = watch.fatal_at if watch.fatal else at_s
            watch.fatal, watch.fatal_line = fatal, line.strip()
    return reached


def _rank(launch: Launch, fatal: Signature) -> int:
    return launch.fatal.index(fatal)


def parse_oom_kills(text: str) -> list[str]:
    """The kernel's `oom-kill:` lines: which task it killed.

    Sample (the lab, cgroup v1): ``[13498.89] oom-kill:constraint=CONSTRAINT_MEMCG,...,
    oom_memcg=/infergate-lab/node2,task_memcg=/infergate-lab/node2/88820cf2...,
    task=VLLM::Worker_TP1,pid=2528,uid=0``
    """
    found = re.findall(r"oom-kill:.*?task=([^,]*),pid=(\d+)", text)
    return [f"{task} (pid {pid})" for task, pid in found]


def missing(milestone: Milestone, watches: dict[str, NodeWatch]) -> list[str]:
    """The nodes that must reach MILESTONE and have not."""
    return [n for n in milestone.nodes if milestone.name not in watches[n].reached]


HEARTBEAT_S = 30.0  # between two lines of a wait with no milestone (a 900 s weight load)
# ANSI escape sequences (ECMA-48 CSI: colours, cursor moves) that a terminal would not show
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def behind(gate: Gate, watches: dict[str, NodeWatch], head: str) -> list[str]:
    """The nodes a waiting GATE waits on: a milestone's nodes not past it, else the node
    that answers it (Ray's head, the API's)."""
    if isinstance(gate, Milestone):
        return missing(gate, watches)
    return [gate.node if isinstance(gate, ClusterJoined) else head]


def last_said(lines: list[str]) -> str:
    """The last thing a node's log shows, as a terminal would: the last part after a "\\r"
    that is not blank (a progress bar redraws its line), without ANSI codes.

    Sample (tqdm): ``\\rLoading safetensors checkpoint shards:  45% Completed | 5/11``
    """
    for line in reversed(lines):
        parts = [p.strip() for p in _ANSI.sub("", line).split("\r")]
        if shown := next((p for p in reversed(parts) if p), ""):
            return shown
    return ""


@dataclass
class Heartbeat:
    """When a wait says where each node is: after HEARTBEAT_S seconds of the launch with
    nothing said (a milestone said starts the count again)."""

    every_s: float = HEARTBEAT_S
    next_at: float = HEARTBEAT_S

    def due(self, now_s: float) -> bool:
        if now_s < self.next_at:
            return False
        self.said(now_s)
        return True

    def said(self, now_s: float) -> None:
        self.next_at = now_s + self.every_s


def error_lines(lines: list[str], count: int = 6) -> list[str]:
    """The lines that name an error (a root cause sits far above a log's end), not the
    traceback's `File ...` frames."""
    errors = [ln for ln in lines if re.search(r"Error|error:|FAILED|WARN", ln)]
    return [ln for ln in errors if not ln.lstrip().startswith("File ")][-count:]


@dataclass(frozen=True)
class RayStatus:
    active: int  # alive nodes: Ray 2.8+ lists the ones running nothing under Idle:
    gpus: float


def parse_ray_status(text: str) -> RayStatus:
    """`ray status`: count the node lines under Active: and Idle:, read the GPU total.

    Sample: ``Active:\n 1 node_5b1e...\nIdle:\n 1 node_9c2a...\nPending:\n (no pending
    nodes)`` and under Usage: `` 0.0/2.0 GPU``.
    """
    alive, section, gpus = 0, "", 0.0
    for line in text.splitlines():
        if not line.startswith(" "):
            section = line.strip()
        elif section in ("Active:", "Idle:") and re.match(r"\s+\d+ node_", line):
            alive += int(line.split()[0])
        used = re.match(r"\s*[\d.]+/([\d.]+) GPU\b", line)
        if used:
            gpus = float(used.group(1))
    return RayStatus(alive, gpus)


@dataclass(frozen=True)
class Process:
    pid: int
    args: str


def parse_top(top: Mapping[str, Any]) -> list[Process]:
    """The Engine API's `GET /containers/ID/top?ps_args=-o pid,args` (what `docker top`
    prints, as rows).

    Sample: ``{"Titles": ["PID", "COMMAND"], "Processes": [["4127", "/opt/venv/bin/python3
    /opt/venv/bin/vllm serve ..."]]}``
    """
    return [Process(int(pid), args) for pid, args in top.get("Processes") or [] if pid.isdigit()]
