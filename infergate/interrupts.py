"""Ctrl-C, SIGTERM and SIGHUP held while the suite removes what it started: an interruption
then would leave containers behind. Each is remembered and raised as KeyboardInterrupt once
the removal is done."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, a CI cancel, a closed terminal


class sigint_deferred:
    """Hold HELD for the block (in the main thread; elsewhere signals never arrive), saying
    each with SAY; raise KeyboardInterrupt at its end if one came."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say, self.pending = say, False
        self.previous: dict[int, object] = {}

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._hold) for s in HELD}

    def _hold(self, number: int, _: object) -> None:
        self.pending = True
        self.say(f"{signal.Signals(number).name}: removing this run's containers first")

    def __exit__(self, *_: object) -> None:
        for number, previous in self.previous.items():
            signal.signal(number, previous)  # type: ignore[arg-type]
        if self.pending:
            raise KeyboardInterrupt
