"""One lab selftest run at a time on this machine: the session's `lab` fixture holds an
exclusive flock(2) on LOCK for as long as it has the lab, and a second run waits for it,
saying once which process holds it.

LOCK is not /tmp/infergate-lab.lock, which people take around a whole run (`flock
/tmp/infergate-lab.lock pytest selftest/...`): the run inside would wait on its own wrapper.
Nor is it under the lab's LAB_DIR or RUN_DIR, which `down` removes and `leftovers` counts.

A process started by the holder (a pytest a selftest runs, and anything it starts) inherits
HELD_BY, the holder's pid and LOCK, and passes through without waiting: it is part of the
run that holds the lab, and waiting for its own ancestor would never end. A process that is
not the holder's descendant waits, even with HELD_BY in its environment (a shell that kept
it)."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = Path("/run/lock/infergate-lab-selftests.lock")
HELD_BY = "INFERGATE_LAB_SELFTEST_GUARD"  # "<pid>:<lock path>" of the run that holds it


@contextmanager
def lab_guard(path: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Hold PATH's lock for the block: at once where an ancestor holds it, else when the
    holder lets go, after SAY has named it."""
    if _ancestor_holds(path):
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as lock:  # a+: the holder's line stays readable while we wait
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "a process that has not said which yet"
            say(f"lab selftests: waiting for {path}, held by {holder}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(_me() + "\n")
        lock.flush()
        before = os.environ.get(HELD_BY)
        os.environ[HELD_BY] = f"{os.getpid()}:{path}"
        try:
            yield
        finally:
            _restore(before)
            lock.truncate(0)  # the lock itself goes with the file's closing


def _me() -> str:
    comm = Path("/proc/self/comm").read_text().strip()
    return f"pid {os.getpid()} ({comm}) since {time.strftime('%H:%M:%S %Z')}"


def _restore(before: str | None) -> None:
    if before is None:
        os.environ.pop(HELD_BY, None)
    else:
        os.environ[HELD_BY] = before


def _ancestor_holds(path: Path) -> bool:
    """HELD_BY names PATH and a process this one descends from."""
    pid, _, held = os.environ.get(HELD_BY, "").partition(":")
    return held == str(path) and pid.isdigit() and int(pid) in _ancestors()


def _ancestors() -> set[int]:
    """This process's parent, its parent, and so on up to pid 1."""
    found, pid = set(), os.getppid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rpartition(")")[2].split()[1])  # the field after the state
    return found
