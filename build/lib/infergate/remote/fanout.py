"""One way to work on many nodes at once: every node in parallel, at most FAN_OUT_CAP at a
time, the results keyed as the work was. The preflight's reads, the deploy's starts and
removals, and `infergate down` all go through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from infergate.remote.ssh import NodeUnreachable, Outcome, Remote

# Each task holds one ssh client and its pipes: this bounds them, and the controller's
# threads, at any plan size (scripts/bench_scale.py measures the controller at 128 nodes).
FAN_OUT_CAP = 32

K = TypeVar("K")
T = TypeVar("T")


def each(keys: Iterable[K], work: Callable[[K], T], cap: int = FAN_OUT_CAP) -> dict[K, T]:
    """WORK for every key at once, at most CAP at a time; its first exception is raised."""
    keys = list(keys)
    with ThreadPoolExecutor(max_workers=max(1, min(cap, len(keys)))) as pool:
        return dict(zip(keys, pool.map(work, keys), strict=True))


def on_every_node(remotes: dict[str, Remote], task: Callable[[Remote], T]) -> dict[str, Outcome[T]]:
    """TASK for every node at once; a node that cannot answer is an outcome, not a crash."""

    def guarded(name: str) -> Outcome[T]:
        try:
            return task(remotes[name])
        except NodeUnreachable as e:
            return e

    return each(remotes, guarded)
