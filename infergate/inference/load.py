"""The load client: a level's streams on one asyncio event loop, as `vllm bench serve` runs
its load (aiohttp on one loop), with the standard library's loop and HTTP/1.1 alone.

Each read is stamped in the connection's `data_received`, when the loop hands the bytes
over, and a stream's events are parsed from its stamped reads once it ends
(client.record_reads), so no stream's JSON delays another's stamp. Threads held 733 of
1,024 streams; the loop holds them all at a third of the CPU
(docs/performance.md#the-load-client-at-scale).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import resource
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from http.client import RemoteDisconnected
from urllib.parse import urlsplit

import certifi

from infergate.inference.client import (
    STREAM_HEADERS,
    Body,
    Recorder,
    StreamRecord,
    record_reads,
    streamed,
)
from infergate.plan.model import MAX_IN_FLIGHT
from infergate.remote import http_session

MAX_HEAD_BYTES = 64 * 1024  # a response's status line and headers; uvicorn's are < 1 KiB
# sockets beyond the streams: the loop's own, the SSH masters, the engines' forwards
SPARE_FDS = 256

# called on the loop as each request ends
OnDone = Callable[[StreamRecord], None]


@dataclass(frozen=True)
class LoadRun:
    """One level: every request's record, in the order sent, and the wall time."""

    concurrency: int  # the closed loop's; 0 for an open-loop level
    records: tuple[StreamRecord, ...]
    duration_s: float  # first request sent to last one finished, as vLLM's benchmark_duration
    rate: float | None = None  # the open loop's planned requests/s
    repeated: int = 0  # requests that reused a body


def run_load(
    base_url: str,
    path: str,
    bodies: Sequence[Body],
    concurrency: int,
    timeout_s: float,
    api_key: str | None = None,
    ca_bundle: str | None = None,
    *,
    duration_s: float | None = None,
    on_done: OnDone | None = None,
) -> LoadRun:
    """Keep exactly CONCURRENCY requests in flight, as `vllm bench serve --max-concurrency N`:
    every body once, or new ones until DURATION_S, those then in flight finishing and
    counting (docs/deploy-and-inference.md#closed-loop-levels)."""
    _allow_sockets(concurrency)

    async def closed() -> LoadRun:
        async with _Endpoint(base_url, path, timeout_s, api_key, ca_bundle, on_done) as endpoint:
            feed = _Feed(bodies, duration_s)
            found: list[tuple[int, StreamRecord]] = []

            async def stream_after_stream() -> None:
                while (item := feed.next()) is not None:
                    found.append((item[0], await endpoint.send(item[1])))

            await asyncio.gather(*(stream_after_stream() for _ in range(concurrency)))
            records = tuple(record for _, record in sorted(found, key=lambda pair: pair[0]))
            duration = time.perf_counter() - feed.start
        return LoadRun(concurrency, records, duration, repeated=feed.repeated)

    return asyncio.run(closed())


def arrival_gaps(rate: float, seed: int) -> Iterator[float]:
    """Seconds before each request: 0 for the first, then exponential gaps of mean 1/rate
    (a Poisson process), as `vllm bench serve --request-rate R` draws them with burstiness
    1 (vllm/benchmarks/serve.py get_request: gamma(shape=1, scale=1/R)); endless."""
    rng = random.Random(seed)
    yield 0.0
    while True:
        yield rng.expovariate(rate)


def run_open_loop(
    base_url: str,
    path: str,
    bodies: Sequence[Body],
    rate: float,
    timeout_s: float,
    api_key: str | None = None,
    ca_bundle: str | None = None,
    *,
    seed: int = 0,
    duration_s: float | None = None,
    on_done: OnDone | None = None,
    max_in_flight: int = MAX_IN_FLIGHT,
) -> LoadRun:
    """Send requests at Poisson arrivals of RATE per second, whether or not earlier ones have
    finished, at most MAX_IN_FLIGHT at once; each record keeps its planned arrival
    (docs/deploy-and-inference.md#open-loop-levels)."""
    _allow_sockets(max_in_flight)

    async def open_loop() -> LoadRun:
        async with _Endpoint(base_url, path, timeout_s, api_key, ca_bundle, on_done) as endpoint:
            feed = _Feed(bodies, duration_s)
            slots = asyncio.Semaphore(max_in_flight)  # FIFO: waiters start in arrival order

            async def arrive(body: Body, due: float) -> StreamRecord:
                async with slots:
                    return await endpoint.send(body, due)

            sent = []
            due = feed.start
            for gap in arrival_gaps(rate, seed):
                due += gap
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                if (item := feed.next()) is None:
                    break
                sent.append(asyncio.create_task(arrive(item[1], due)))
            records = tuple(await asyncio.gather(*sent))
            duration = time.perf_counter() - feed.start
        return LoadRun(0, records, duration, rate=rate, repeated=feed.repeated)

    return asyncio.run(open_loop())


class _Feed:
    """The bodies in order from `start`; with a duration, cycling through them until it has
    passed; without one, each body once."""

    def __init__(self, bodies: Sequence[Body], duration_s: float | None) -> None:
        self.bodies, self.start = bodies, time.perf_counter()
        self.deadline = None if duration_s is None else self.start + duration_s
        self.sent = 0

    def next(self) -> tuple[int, Body] | None:
        late = self.deadline is not None and time.perf_counter() >= self.deadline
        if late or not self.bodies or (self.deadline is None and self.sent >= len(self.bodies)):
            return None
        self.sent += 1
        return self.sent - 1, self.bodies[(self.sent - 1) % len(self.bodies)]

    @property
    def repeated(self) -> int:
        return max(0, self.sent - len(self.bodies))


class _Endpoint:
    """The endpoint's keep-alive connections for one level, opened as streams need them
    and all closed when it ends; every request the same but for its body."""

    def __init__(
        self,
        base_url: str,
        path: str,
        timeout_s: float,
        api_key: str | None,
        ca_bundle: str | None,
        on_done: OnDone | None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http(s) URL like http://head:8000/v1")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.tls = _tls(ca_bundle) if parts.scheme == "https" else None
        self.timeout_s, self.on_done = timeout_s, on_done
        target = parts.path.rstrip("/") + "/" + path.lstrip("/")
        head = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc.rpartition('@')[2]}"]
        head += [f"{k}: {v}" for k, v in STREAM_HEADERS.items()]
        head += ["Accept-Encoding: identity"]  # the bytes as sent, timed as they arrive
        head += [f"Authorization: Bearer {api_key}"] if api_key else []
        self.head = "\r\n".join(head).encode()
        self.idle: list[_Connection] = []

    async def __aenter__(self) -> _Endpoint:
        return self

    async def __aexit__(self, *_: object) -> None:
        for connection in self.idle:
            connection.close()

    async def send(self, body: Body, arrival_s: float | None = None) -> StreamRecord:
        """One stream within its deadline; never raises for what the server or the network
        did: that lands in the record's `status` and `error`."""
        payload = streamed(body)
        request = self.head + b"\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload
        rec = Recorder(time.perf_counter())
        reply: _Reply | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                reply = await self._exchange(request)
                await reply.whole
            rec.status = reply.status
            if reply.status != 200:
                rec.error = f"HTTP {reply.status}: {reply.text()[:500]}"
            else:
                record_reads(reply.reads, rec)
        except http_session.ERRORS as e:
            if reply is not None and reply.status is not None:
                rec.status = reply.status
                record_reads(reply.reads, rec, ended=False)
            rec.failed(_plain(e), self.timeout_s)
        finally:
            if reply is not None:
                reply.abandon()  # a deadline, an error or Ctrl-C mid-reply: not reusable
        record = rec.freeze() if arrival_s is None else replace(rec.freeze(), arrival_s=arrival_s)
        if self.on_done is not None:
            self.on_done(record)
        return record

    async def _exchange(self, request: bytes) -> _Reply:
        """REQUEST on an idle connection, or a new one; a kept-alive connection the server
        closed before answering is replaced once, as browsers and aiohttp do."""
        while self.idle:
            connection = self.idle.pop()
            if connection.open:
                try:
                    return await self._began(connection, request)
                except RemoteDisconnected:
                    break
        async with asyncio.timeout(min(http_session.CONNECT_S, self.timeout_s)):
            _, connection = await asyncio.get_running_loop().create_connection(
                _Connection, self.host, self.port, ssl=self.tls
            )
        return await self._began(connection, request)

    async def _began(self, connection: _Connection, request: bytes) -> _Reply:
        """REQUEST sent on CONNECTION, once its status line is in; a deadline or Ctrl-C
        before that closes the connection, whose answer no one will read."""
        reply = connection.send(request, self._done_with(connection))
        try:
            await reply.began
        except BaseException:
            reply.abandon()
            raise
        return reply

    def _done_with(self, connection: _Connection) -> Callable[[_Reply], None]:
        def after(reply: _Reply) -> None:
            if reply.keep_alive and connection.open:
                self.idle.append(connection)
            else:
                connection.close()

        return after


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection carrying one exchange at a time; every read stamped as it
    arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reply: _Reply | None = None

    @property
    def open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, request: bytes, after: Callable[[_Reply], None]) -> _Reply:
        assert self.transport is not None
        self.reply = _Reply(asyncio.get_running_loop(), after)
        self.transport.write(request)
        return self.reply

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self.reply is not None:
            self.reply.take(data, now)
            if self.reply.ended:
                self.reply = None
        else:  # nothing was asked: the connection is out of step
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.reply is not None:
            self.reply.lost(exc)
            self.reply = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _Reply:
    """One response, parsed as its bytes arrive: the status line and headers, then a body
    chunked, of a Content-Length, or up to the close; the body's reads kept with their
    times. `began` resolves with the status line, `whole` at the body's end."""

    def __init__(self, loop: asyncio.AbstractEventLoop, after: Callable[[_Reply], None]) -> None:
        self.began: asyncio.Future[None] = loop.create_future()
        self.whole: asyncio.Future[None] = loop.create_future()
        self.after = after
        self.status: int | None = None
        self.keep_alive = True
        self.reads: list[tuple[bytes, float]] = []
        self.answered = False  # any byte came back
        self.ended = False
        self._head = b""
        self._framing = ""  # chunked, length or close
        self._left = 0  # bytes left: of the body (length) or of the chunk (chunked)
        self._buffer = b""  # chunked framing not yet read
        self._last_chunk = False

    def text(self) -> str:
        return b"".join(data for data, _ in self.reads).decode("utf-8", errors="replace")

    def take(self, data: bytes, now: float) -> None:
        self.answered = True
        try:
            if self.status is None and not (data := self._take_head(data)):
                if self._framing == "length" and self._left == 0:
                    self._end()
                return
            body = self._unchunk(data) if self._framing == "chunked" else self._count(data)
            if body:
                self.reads.append((body, now))
        except ValueError as e:
            self._fail(ConnectionError(f"malformed HTTP response: {e}"))

    def lost(self, exc: Exception | None) -> None:
        if self._framing == "close" and exc is None:
            self._end()
        elif not self.answered:  # on a kept-alive connection: closed idle, sent again
            unanswered = RemoteDisconnected("Remote end closed connection without response")
            unanswered.__cause__ = exc
            self._fail(unanswered)
        else:
            self._fail(exc or ConnectionResetError("the server closed the connection mid-reply"))

    def _take_head(self, data: bytes) -> bytes:
        """Read the status line and headers; the body bytes after them."""
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > MAX_HEAD_BYTES:
                raise ValueError(f"no end of headers in {MAX_HEAD_BYTES} bytes")
            return b""
        status_line, *lines = self._head[:end].decode("latin-1").split("\r\n")
        rest = self._head[end + 4 :]
        version, status = status_line.split(" ", 2)[:2]
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
        self.status = int(status)
        connection = headers.get("connection", "").lower()
        self.keep_alive = version == "HTTP/1.1" and connection != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = "chunked"
        elif "content-length" in headers:
            self._framing, self._left = "length", int(headers["content-length"])
        else:
            self._framing, self.keep_alive = "close", False
        self.began.set_result(None)
        return rest

    def _count(self, data: bytes) -> bytes:
        if self._framing == "length":
            data = data[: self._left]
            self._left -= len(data)
            if self._left == 0:
                self._end()
        return data

    def _unchunk(self, data: bytes) -> bytes:
        """The chunks' payload in DATA, framing kept for the next read when cut."""
        buffer, found = self._buffer + data, []
        while True:
            if self._left:
                piece = buffer[: self._left]
                found.append(piece)
                buffer, self._left = buffer[len(piece) :], self._left - len(piece)
                if self._left:
                    break
            end = buffer.find(b"\r\n")
            if end < 0:
                break
            line, buffer = buffer[:end], buffer[end + 2 :]
            if self._last_chunk:
                if not line:  # the blank line after the last chunk and any trailers
                    self._end()
                    break
                continue
            if not line:  # the CRLF that closes each chunk's data
                continue
            self._left = int(line.split(b";")[0], 16)
            self._last_chunk = self._left == 0
        self._buffer = buffer
        return b"".join(found)

    def _end(self) -> None:
        if not self.ended:
            self.ended = True
            if not self.began.done():
                self.began.set_result(None)
            self.whole.set_result(None)
            self.after(self)

    def _fail(self, error: Exception) -> None:
        if not self.ended:
            for waiting in (self.began, self.whole):
                if not waiting.done():
                    waiting.set_exception(error)
                    waiting.exception()  # read here: a failed `began` leaves `whole` unawaited
            self.abandon()

    def abandon(self) -> None:
        """No more of this reply is wanted: its connection is closed, not kept."""
        if not self.ended:
            self.ended, self.keep_alive = True, False
            self.after(self)


@functools.cache
def _tls(ca_bundle: str | None) -> ssl.SSLContext:
    """Verified as the suite's requests sessions verify: the CA bundle, else certifi's."""
    return ssl.create_default_context(cafile=ca_bundle or certifi.where())


def _plain(error: BaseException) -> BaseException:
    """The words a blocking socket says: asyncio's connect says `Connect call failed
    ('10.0.0.1', 8000)` for `Connection refused`, and its deadline says nothing."""
    if isinstance(error, OSError) and error.errno and str(error.strerror).startswith("Connect"):
        return type(error)(error.errno, os.strerror(error.errno))
    if isinstance(error, TimeoutError) and not error.args:
        return TimeoutError("timed out")
    return error


def _allow_sockets(streams: int) -> None:
    """Raise this process's open-files soft limit to hold STREAMS sockets, within the hard
    limit (1,024 is many distributions' soft default); past it, connects fail as EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = streams + SPARE_FDS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        top = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
