"""A level's progress as it runs: "c=16: 40/64 done, 812 tok/s so far", said every few
seconds from the threads that finish requests, and once more at the level's end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from infergate.inference.client import StreamRecord

EVERY_S = 5.0  # one line per level this often: a 10-minute level shows it is alive


class Progress:
    """Counts a level's finished requests; `on_done` is load.run_load's hook."""

    def __init__(
        self, label: str, total: int | None, say: Callable[[str], None], every_s: float = EVERY_S
    ) -> None:
        self.label, self.total, self.say, self.every_s = label, total, say, every_s
        self.done = self.failed = self.tokens = 0
        self.start = self.said = time.perf_counter()
        self.lock = threading.Lock()

    def on_done(self, record: StreamRecord) -> None:
        with self.lock:
            self.done += 1
            self.failed += not record.ok
            self.tokens += record.completion_tokens or 0
            now = time.perf_counter()
            # the last request's line is finish's to say
            if now - self.said >= self.every_s and self.done != self.total:
                self.said = now
                self.say(self.line(now))

    def finish(self, repeated: int = 0) -> None:
        """The level's last line; REPEATED: requests that reused a prompt (a duration level
        that outlasted its prompts: the engine's prefix cache may have served those)."""
        again = f", {repeated} reused a prompt" if repeated else ""
        with self.lock:
            self.say(self.line(time.perf_counter()) + f" (level done{again})")

    def line(self, now: float) -> str:
        """The level, requests done (of how many, when counted), output tok/s since its start."""
        of = f"/{self.total}" if self.total is not None else ""
        failed = f", {self.failed} failed" if self.failed else ""
        rate = self.tokens / max(now - self.start, 1e-9)
        return f"{self.label}: {self.done}{of} done{failed}, {rate:.0f} tok/s so far"
