"""Ctrl-C, SIGTERM and SIGHUP held while the suite removes what it started: an interruption
then would leave containers behind. Each is remembered and raised as KeyboardInterrupt once
the removal is done. A handler never writes to the terminal: after a hangup that write fails
(EIO) inside whatever the removal was doing (docs/notes.md#a-closed-terminal)."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
from pathlib import Path

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, a CI cancel, a closed terminal
# what a write to a closed terminal or a reader gone raises
GONE = (errno.EIO, errno.EPIPE)
TERMINALS = ("/dev/pts/", "/dev/tty", "/dev/console")


def hung_up() -> None:
    """After SIGHUP, as nohup does: further SIGHUPs ignored, and every descriptor on a
    terminal (fds 0-2, and the copies pytest's capture keeps) pointed at /dev/null."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone
            if os.readlink(f"/proc/self/fd/{name}").startswith(TERMINALS):
                os.dup2(null, int(name))
    os.close(null)


def note(log: Path | None, line: str) -> None:
    """LINE appended to LOG in one write, safe in a signal handler: a failure is dropped."""
    if log is None:
        return
    with contextlib.suppress(OSError):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)


class sigint_deferred:
    """Hold HELD for the block (in the main thread; elsewhere signals never arrive), noting
    each in LOG; raise KeyboardInterrupt at its end if one came. A signal already ignored
    (SIGHUP after a hangup, or under nohup) stays ignored."""

    def __init__(self, log: Path | None) -> None:
        self.log, self.pending = log, False
        self.previous: dict[int, object] = {}

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            held = [s for s in HELD if signal.getsignal(s) is not signal.SIG_IGN]
            self.previous = {s: signal.signal(s, self._hold) for s in held}

    def _hold(self, number: int, _: object) -> None:
        self.pending = True
        if number == signal.SIGHUP:
            hung_up()
        note(self.log, f"{signal.Signals(number).name}: removing this run's containers first")

    def __exit__(self, *_: object) -> None:
        for number, previous in self.previous.items():
            if signal.getsignal(number) is not signal.SIG_IGN:
                signal.signal(number, previous)  # type: ignore[arg-type]
        if self.pending:
            raise KeyboardInterrupt
