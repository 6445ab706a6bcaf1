"""Timings of the long lab jobs (image build, distribution, model conversion), said as they
finish and kept for a summary: the cold and the cached paths differ by minutes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

Say = Callable[[str], None]


@dataclass
class Clock:
    say: Say
    laps: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def lap(self, name: str) -> Iterator[None]:
        """Time the block as `name`; said and kept only when the block succeeds."""
        start = time.monotonic()
        yield
        self.laps[name] = time.monotonic() - start
        self.say(f"{name}: {self.laps[name]:.1f} s")

    def summary(self) -> str:
        return "\n".join(f"  {name:<40} {s:8.1f} s" for name, s in self.laps.items())
