"""Pure readers of what a launch shows on a node: its container's state and new log lines,
`ray status`, `docker top`; and the problems they mean."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from infergate.deploy.launch import Launch, Milestone
from infergate.signatures import Signature

LOG_MARK = "::infergate-log::"
OOM_MARK = "::infergate-oom::"


@dataclass
class NodeWatch:
    """What the controller has seen of one node's engine container so far."""

    container: str
    container_id: str = ""  # what `docker run -d` printed: the kernel's OOM lines name it
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

    def last_lines(self, count: int = 12) -> list[str]:
        return self.lines[-count:]


def poll_command(watch: NodeWatch) -> str:
    """One round trip: the container's state, the log lines not seen yet, and the kernel's
    OOM kills inside the container (`dmesg` names its cgroup, hence its ID)."""
    c = shlex.quote(watch.container)
    state = "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}"
    oom = ""
    if watch.container_id:
        kid = shlex.quote(watch.container_id)
        # the victim's cgroup (task_memcg), not the cpuset of the task that hit the limit
        oom = f"; echo {OOM_MARK}; dmesg 2>/dev/null | grep -E 'oom-kill:.*task_memcg=[^,]*'{kid}"
    return (
        f"docker inspect -f '{state}' {c} 2>/dev/null || echo missing; echo {LOG_MARK}; "
        f"docker logs {c} 2>&1 | tail -n +{len(watch.lines) + 1}{oom}"
    )


def apply_poll(watch: NodeWatch, text: str) -> list[str]:
    """Update WATCH from poll_command's output; returns the new log lines.

    Sample: ``running 0 false\\n::infergate-log::\\nINFO 11-30 04:40:12 [api_server.py] ...``
    """
    text, _, oom = text.partition(OOM_MARK + "\n")
    watch.oom_kills = parse_oom_kills(oom) or watch.oom_kills
    head, _, logs = text.partition(LOG_MARK + "\n")
    fields = head.split()
    if fields[:1] == ["missing"] or len(fields) < 3:
        watch.state = "missing" if watch.started else "not started"
    else:
        watch.state, watch.exit_code = fields[0], int(fields[1])
        watch.oom_killed = fields[2] == "true"
    # by "\n" only, as `tail -n +N` counts: a progress bar's "\r" (tqdm's shard loading)
    # split off as lines of their own would make the next poll skip as many real ones
    new = logs.split("\n")
    if new[-1] == "":
        new.pop()
    watch.lines += new
    return new


def scan(launch: Launch, watch: NodeWatch, node: str, new: list[str], at_s: float) -> list[str]:
    """Record milestones and the most specific fatal line in NEW (a Traceback's cause comes
    after it); returns the milestones reached."""
    reached = []
    for line in new:
        for m in launch.milestones:
            if node in m.nodes and m.name not in watch.reached and m.reached_by(line):
                watch.reached[m.name] = at_s
                reached.append(m.name)
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


def parse_docker_top(text: str) -> list[Process]:
    """`docker top CONTAINER -o pid,args`.

    Sample: ``PID    COMMAND\\n4127   /opt/venv/bin/python3 /opt/venv/bin/vllm serve ...``
    """
    processes = []
    for line in text.splitlines()[1:]:
        pid, _, args = line.strip().partition(" ")
        if pid.isdigit():
            processes.append(Process(int(pid), args.strip()))
    return processes
