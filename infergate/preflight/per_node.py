"""One remote read per node, made once for all nodes together: the first caller reads every
node at once (sixteen nodes cost about what two do), and every later caller gets the same
outcomes, failures included. Given a ONCE (under xdist, the first worker reads and the others
load what it kept), the read is made once per run rather than once per process; given a SHARD
(--shard-by), a process reads its shard's nodes and takes the others' as the shards read them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from infergate.checks import facts as read
from infergate.plan.model import Node
from infergate.remote.fanout import on_every_node
from infergate.remote.ssh import NodeUnreachable, Outcome, Remote

T = TypeVar("T")
Once = Callable[[Callable[[], Any]], Any]  # a read -> its outcomes, once per run


def in_this_process(read: Callable[[], T]) -> T:
    """The plain ONCE: the read, made here."""
    return read()


class Shard(Protocol):
    """This worker's part of a fact under sharded workers (fixtures/shards.py): the nodes it
    reads itself, what the other workers read and the controller passed on, and where its own
    reads go to be passed on."""

    home: frozenset[str]

    def given(self) -> dict[str, Outcome[Any]]: ...

    def publish(self, outcomes: dict[str, Outcome[Any]]) -> None: ...


class PerNode(Generic[T]):
    """TASK's outcome on every node, read on first use: on every node at once; given a
    SHARD, a node of its home reads the home's nodes at once, and every() takes what the
    other shards gave before it reads what is still missing."""

    def __init__(
        self,
        remotes: dict[str, Remote],
        task: Callable[[Remote], T],
        once: Once = in_this_process,
        shard: Shard | None = None,
    ) -> None:
        self._remotes, self._task, self._once, self._shard = remotes, task, once, shard
        self._done: dict[str, Outcome[T]] = {}
        self._lock = threading.Lock()

    def of(self, node: Node) -> Outcome[T]:
        with self._lock:
            if node.name not in self._done:
                home = self._shard.home if self._shard else frozenset()
                self._read(home if node.name in home else frozenset(self._remotes))
            return self._done[node.name]

    def known(self) -> dict[str, Outcome[T]]:
        """What has been read (or given) so far, reading nothing: empty before the first call."""
        with self._lock:
            return dict(self._done)

    def every(self) -> dict[str, Outcome[T]]:
        with self._lock:
            if len(self._done) < len(self._remotes):  # once complete, every call is O(1)
                self._read(frozenset(self._remotes))
                self._done = {name: self._done[name] for name in self._remotes}
            return self._done

    def _read(self, names: frozenset[str]) -> None:
        """Read NAMES not read yet: once per run without a shard, else here, after what the
        other shards gave."""
        if self._shard is None:
            if not self._done:
                self._done = self._once(lambda: on_every_node(self._remotes, self._task))
            return
        given = self._shard.given()
        self._done |= {n: given[n] for n in names if n in given and n not in self._done}
        left = {n: r for n, r in self._remotes.items() if n in names and n not in self._done}
        if left:
            read = on_every_node(left, self._task)
            self._shard.publish(dict(read))
            self._done |= read


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
