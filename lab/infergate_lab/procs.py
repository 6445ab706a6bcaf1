"""Processes the lab started, named by pid *and* start time so a recycled pid is never hit."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from infergate.waiting import Deadline, WaitTimedOut, wait_until

# SIGTERM to SIGKILL: a lab service (sshd, dockerd with its containers) ends in well under
# a second; eight leave a busy 2-core controller room
STOP_DEADLINE = Deadline(8.0, "infergate_lab.procs.STOP_DEADLINE")
# After SIGKILL only a process in state D lingers; it is left behind after this
KILLED_DEADLINE = Deadline(5.0, "infergate_lab.procs.KILLED_DEADLINE")


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the `(comm)` field, which may itself hold spaces or parens."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: clock ticks after boot; None when there is no such pid."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # start_time() when recorded

    @classmethod
    def of(cls, pid: int) -> Proc:
        start = start_time(pid)
        if start is None:
            raise ProcessLookupError(f"pid {pid} exited before it could be recorded")
        return cls(pid, start)

    def alive(self) -> bool:
        """Same process still there, and not a zombie waiting for init to reap it."""
        fields = _stat_fields(self.pid)
        return fields is not None and int(fields[19]) == self.start and fields[0] != "Z"

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):  # exited since alive()
                os.kill(self.pid, sig)


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def tree(root: Proc) -> list[Proc]:
    """root and its living descendants (by parent pid), root first."""
    if not root.alive():
        return []
    children, found, todo = _children_map(), [root], [root.pid]
    while todo:
        for pid in children.get(todo.pop(), []):
            start = start_time(pid)
            if start is not None:
                found.append(Proc(pid, start))
                todo.append(pid)
    return found


def stop(procs: Iterable[Proc], deadline: Deadline = STOP_DEADLINE) -> None:
    """SIGTERM, wait up to the deadline, then SIGKILL whatever is left, and wait for that."""
    living = [p for p in procs if p.alive()]
    for p in living:
        p.signal(signal.SIGTERM)
    if _wait_gone(living, deadline):
        return
    for p in living:
        p.signal(signal.SIGKILL)
    _wait_gone(living, KILLED_DEADLINE)


def stop_tree(root: Proc, deadline: Deadline = STOP_DEADLINE) -> None:
    stop(tree(root), deadline)


def _wait_gone(procs: list[Proc], deadline: Deadline) -> bool:
    """Whether every process ended by the deadline (the caller decides what a survivor means)."""

    def gone() -> tuple[bool | None, str]:
        left = [p.pid for p in procs if p.alive()]
        return (None if left else True), f"pids {left} alive"

    try:
        wait_until(gone, "the processes ended", deadline, every_s=0.05)
    except WaitTimedOut:
        return False
    return True
