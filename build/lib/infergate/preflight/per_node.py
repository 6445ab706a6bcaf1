"""One remote read per node, made once for all nodes together: the first caller reads every
node at once (sixteen nodes cost about what two do), and every later caller gets the same
outcomes, failures included. Given a ONCE (under xdist, the first worker reads and the others
load what it kept), the read is made once per run rather than once per process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from infergate.checks import facts as read
from infergate.plan.model import Node
from infergate.remote.fanout import on_every_node
from infergate.remote.ssh import NodeUnreachable, Outcome, Remote

T = TypeVar("T")
Once = Callable[[Callable[[], Any]], Any]  # a read -> its outcomes, once per run


def in_this_process(read: Callable[[], T]) -> T:
    """The plain ONCE: the read, made here."""
    return read()


class PerNode(Generic[T]):
    """TASK's outcome on every node, read on first use."""

    def __init__(
        self, remotes: dict[str, Remote], task: Callable[[Remote], T], once: Once = in_this_process
    ) -> None:
        self._remotes, self._task, self._once = remotes, task, once
        self._done: dict[str, Outcome[T]] | None = None
        self._lock = threading.Lock()

    def of(self, node: Node) -> Outcome[T]:
        return self.every()[node.name]

    def known(self) -> dict[str, Outcome[T]]:
        """What every() has read so far, reading nothing: empty before the first call."""
        with self._lock:
            return dict(self._done or {})

    def every(self) -> dict[str, Outcome[T]]:
        with self._lock:
            if self._done is None:
                self._done = self._once(lambda: on_every_node(self._remotes, self._task))
            return self._done


def value(outcome: Outcome[T]) -> T:
    """The value of an outcome; NodeUnreachable, naming the node, where there is none."""
    if isinstance(outcome, NodeUnreachable):
        raise outcome
    return outcome


def every_value(outcomes: dict[str, Outcome[T]]) -> dict[str, T]:
    """Every node's value; else one NodeUnreachable naming every node that could not say."""
    failed = [str(o) for o in outcomes.values() if isinstance(o, NodeUnreachable)]
    if failed:
        raise NodeUnreachable("\n".join(failed))
    return {name: value(o) for name, o in outcomes.items()}


class FactUnreadable(Exception):
    """The node answered, but the fact could not be read from what it said; names the node."""


def fact(node: Node, outcome: Outcome[read.Sections], reader: Callable[[read.Sections], T]) -> T:
    """One fact of a node's host probe; NodeUnreachable or FactUnreadable, naming the node."""
    try:
        return reader(value(outcome))
    except read.ProbeError as e:
        raise FactUnreadable(f"{node.where}: {e}") from None
