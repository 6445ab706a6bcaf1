"""A launch's containers followed as streams of each node's Docker Engine API, into one
queue: each container's log, and each node's events for this run's label.

Nothing here reads a line's meaning (watch.py does). A stream that ends before `close` says
so (`News.lost`); every stream is closed on `close` (docs/deploy-and-inference.md#log-streams).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from docker import DockerClient
from docker.models.containers import Container

JOIN_S = 5.0  # for the closed streams' threads to end


class Closable(Protocol):
    def close(self) -> None: ...


@dataclass(frozen=True)
class News:
    """One thing a node's engine said: a log line of its container, an event, or that one
    of its streams ended before the launch closed it (LOST: which, and on what)."""

    node: str
    line: str | None = None
    event: dict[str, Any] = field(default_factory=dict)
    lost: str = ""
    lost_log: bool = False  # a container's log: its exit ends it too


def lines_of(chunks: Iterable[bytes]) -> Iterator[str]:
    """The "\\n"-ended lines of a byte stream cut anywhere (the last one even unended)."""
    rest = b""
    for chunk in chunks:
        *whole, rest = (rest + chunk).split(b"\n")
        yield from (line.decode(errors="replace") for line in whole)
    if rest:
        yield rest.decode(errors="replace")


class Streams:
    """Every stream of one launch, into `queue`."""

    def __init__(self) -> None:
        self.queue: queue.Queue[News] = queue.Queue()
        self._open: list[Closable] = []
        self._threads: list[threading.Thread] = []
        self._logs: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._closed = False

    def follow_events(self, node: str, client: DockerClient, label: str) -> None:
        """The container events on NODE of what carries LABEL (key=value), from now on."""
        stream = client.events(decode=True, filters={"type": "container", "label": label})
        lost = News(node, lost="the event stream of its engine")
        self._follow(stream, lambda item: News(node, event=item), lost)

    def follow_log(self, node: str, container: Container) -> None:
        """CONTAINER's whole log, from its first line, then as it is written."""
        stream = container.logs(stream=True, follow=True)
        lost = News(node, lost=f"the log stream of {container.name}", lost_log=True)
        reader = self._follow(stream, lambda line: News(node, line=line), lost, lines_of)
        if reader is not None:
            self._logs[node] = reader

    def finish_log(self, node: str, seconds: float) -> None:
        """Wait up to SECONDS for the log of NODE's stopped container to be read to its end:
        its die event may come before its last lines, the ones that say why."""
        reader = self._logs.get(node)
        if reader is not None:
            reader.join(seconds)

    def _follow(
        self,
        stream: Any,
        news: Callable[[Any], News],
        lost: News,
        items: Callable[[Any], Iterable[Any]] = iter,
    ) -> threading.Thread | None:
        """Pump STREAM (docker-py's CancellableStream) into the queue as NEWS; LOST (its error
        added) when it ends before `close`."""
        with self._lock:
            # the launch ended while this stream was opened
            if self._closed:
                stream.close()
                return None
            self._open.append(stream)
        pump = (stream, news, lost, items)
        name = f"infergate-stream-{lost.node}"
        thread = threading.Thread(target=self._pump, args=pump, daemon=True, name=name)
        self._threads.append(thread)
        thread.start()
        return thread

    def _pump(
        self,
        stream: Any,
        news: Callable[[Any], News],
        lost: News,
        items: Callable[..., Any],
    ) -> None:
        said = "ended: the engine closed the connection"
        try:
            for item in items(stream):
                self.queue.put(news(item))
        except Exception as e:  # whatever its socket raised: said, not hidden
            said = f"ended: {type(e).__name__}: {e}"[:300]
        # closed under its reader (the launch's end): nothing was lost
        with self._lock:
            if not self._closed:
                self.queue.put(replace(lost, lost=f"{lost.lost} {said}"))

    def wait(self, seconds: float) -> list[News]:
        """What came, waiting up to SECONDS for the first of it."""
        try:
            first = [self.queue.get(timeout=seconds)] if seconds > 0 else []
        except queue.Empty:
            first = []
        return first + self.drain()

    def drain(self) -> list[News]:
        """What came, without waiting."""
        found = []
        while True:
            try:
                found.append(self.queue.get_nowait())
            except queue.Empty:
                return found

    def close(self) -> None:
        """Close every stream and let its thread end."""
        with self._lock:
            self._closed, streams = True, list(self._open)
        for stream in streams:
            with contextlib.suppress(Exception):  # already closed by its engine
                stream.close()
        # one wait for all: a stuck thread is a daemon, left behind
        end = time.monotonic() + JOIN_S
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))
