"""An OpenAI-compatible endpoint as clients see it: HTTP through the endpoint's one session
(infergate.remote.http_session), timed per SSE event.

Each event is stamped when the bytes completing it arrive, as `vllm bench serve` stamps it;
every call has its own deadline (docs/deploy-and-inference.md#timing-per-sse-event).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Protocol

from requests import Response

from infergate.inference.sse import Event, EventSplitter, chunk_texts, finish_reason
from infergate.remote import http_session

Body = Mapping[str, object]


@dataclass(frozen=True)
class StreamRecord:
    """One streamed request as the client saw it; times are `time.perf_counter()` seconds."""

    status: int | None  # None: no HTTP response at all
    error: str
    start_s: float  # just before the connection was opened
    content_times: tuple[float, ...]  # each event that carried generated or reasoning text
    end_s: float  # the last JSON event: vLLM's end of a request
    text: str
    reasoning: str
    finish_reason: str | None
    usage: Mapping[str, object] | None
    raw: str  # the response body as received, for framing checks
    arrival_s: float | None = None  # an open loop's planned arrival; None in a closed loop
    timed_out: bool = False  # its deadline ran out: a hang, where the forensics look

    @property
    def ok(self) -> bool:
        """HTTP 200, no error (event, transport or a stream cut before [DONE]), text seen."""
        return self.status == 200 and not self.error and bool(self.content_times)

    @property
    def content_chunks(self) -> int:
        return len(self.content_times)

    @property
    def ttft_s(self) -> float | None:
        return self.content_times[0] - self.start_s if self.content_times else None

    @property
    def completion_tokens(self) -> int | None:
        tokens = (self.usage or {}).get("completion_tokens")
        return tokens if isinstance(tokens, int) else None


@dataclass
class _Recorder:
    start_s: float
    status: int | None = None
    error: str = ""
    times: list[float] = field(default_factory=list)
    end_s: float = 0.0
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Mapping[str, object] | None = None
    raw: list[str] = field(default_factory=list)
    done: bool = False
    timed_out: bool = False

    def on_event(self, event: Event, now: float) -> None:
        chunk = event.chunk()
        # a non-JSON event is framing's to report
        if event.done or chunk is None:
            self.done = self.done or event.done
            return
        self.end_s = now
        # vLLM reports a failure mid-stream as `data: {"error": {...}}`
        if "error" in chunk:
            self.error = f"error event: {json.dumps(chunk['error'])[:500]}"
        text, reasoning = chunk_texts(chunk)
        if text or reasoning:
            self.times.append(now)
            self.text.append(text)
            self.reasoning.append(reasoning)
        self.finish_reason = finish_reason(chunk) or self.finish_reason
        usage = chunk.get("usage")
        self.usage = usage if isinstance(usage, dict) else self.usage

    def freeze(self) -> StreamRecord:
        return StreamRecord(
            status=self.status,
            error=self.error,
            start_s=self.start_s,
            content_times=tuple(self.times),
            end_s=self.end_s or self.start_s,
            text="".join(self.text),
            reasoning="".join(self.reasoning),
            finish_reason=self.finish_reason,
            usage=self.usage,
            raw="".join(self.raw),
            timed_out=self.timed_out,
        )


def stream_completion(
    base_url: str,
    path: str,
    body: Body,
    timeout_s: float,
    api_key: str | None = None,
    ca_bundle: str | None = None,
) -> StreamRecord:
    """POST BODY to BASE_URL (`http://head:8000/v1`) + PATH (`/chat/completions`), streaming
    with usage; record every event's time. Never raises for what the server or the network
    did: that lands in `status` and `error`."""
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    session = http_session.session_for(base_url, api_key, ca_bundle)
    rec = _Recorder(time.perf_counter())
    try:
        with session.post(
            _url(base_url, path),
            json.dumps(streamed),
            headers=STREAM_HEADERS,
            timeout=http_session.timeouts(timeout_s),
            stream=True,
        ) as response:
            rec.status = response.status_code
            if response.status_code != 200:
                rec.error = f"HTTP {response.status_code}: {_text(response)[:500]}"
            else:
                _read_events(response, rec, rec.start_s + timeout_s)
    except http_session.ERRORS as e:
        seen = f" after {len(rec.times)} content chunk(s)" if rec.status == 200 else ""
        # the deadline only where it ran out: a refused port waited for nothing
        timed = rec.timed_out = http_session.cause(e) == http_session.TIMEOUT
        rec.error = (
            http_session.describe(e) + seen + (f" (timeout {timeout_s:g} s)" if timed else "")
        )
    return rec.freeze()


def _read_events(response: Response, rec: _Recorder, deadline: float) -> None:
    """Split the body into lines as its bytes arrive; an event is timed by the read that
    brought the line completing it."""
    splitter = EventSplitter()
    pending = b""
    while data := http_session.read_some(response, deadline):
        now = time.perf_counter()
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            _feed(splitter, line + b"\n", rec, now)
    if pending:  # a last line without its newline
        _feed(splitter, pending, rec, time.perf_counter())
    if event := splitter.flush():
        rec.on_event(event, time.perf_counter())
    if not rec.done and not rec.error:
        rec.error = f"stream ended without `data: [DONE]` after {len(rec.times)} content chunk(s)"


def _feed(splitter: EventSplitter, line: bytes, rec: _Recorder, now: float) -> None:
    text = line.decode("utf-8", errors="replace")
    rec.raw.append(text)
    if event := splitter.feed(text.rstrip("\r\n")):
        rec.on_event(event, now)


@dataclass(frozen=True)
class Reply:
    """One call's outcome: the status and the parsed JSON reply (its text when not JSON);
    status 0 when no answer came, BODY then the reason and CAUSE its kind
    (http_session.cause: refused, dns, tls, timeout, connection)."""

    status: int
    body: object
    cause: str = ""


def post_json(
    base_url: str,
    path: str,
    body: Body | str,
    timeout_s: float,
    api_key: str | None = None,
    ca_bundle: str | None = None,
) -> tuple[int, object]:
    """POST a JSON body (a str is sent as it is: a malformed body on purpose); the status
    and the parsed JSON reply (its text when not JSON); status 0 when no answer came."""
    payload = body if isinstance(body, str) else json.dumps(body)
    reply = call("POST", base_url, path, payload, timeout_s, api_key, ca_bundle)
    return reply.status, reply.body


def get_json(
    base_url: str,
    path: str,
    timeout_s: float,
    api_key: str | None = None,
    ca_bundle: str | None = None,
) -> tuple[int, object]:
    """GET (`/models`); the status and the parsed JSON reply (its text when not JSON);
    status 0 and the reason when no answer came (refused, timed out)."""
    reply = call("GET", base_url, path, None, timeout_s, api_key, ca_bundle)
    return reply.status, reply.body


def call(
    method: str,
    base_url: str,
    path: str,
    payload: str | None,
    timeout_s: float,
    api_key: str | None = None,
    ca_bundle: str | None = None,
) -> Reply:
    """One request through the endpoint's session; never raises for what the network did."""
    session = http_session.session_for(base_url, api_key, ca_bundle)
    try:
        response = session.request(
            method,
            _url(base_url, path),
            data=payload,
            headers=JSON_HEADERS,
            timeout=http_session.timeouts(timeout_s),
        )
    except http_session.ERRORS as e:
        said = f"no answer from {base_url}: {http_session.describe(e)}"
        return Reply(0, said, http_session.cause(e))
    text = _text(response)
    try:
        return Reply(response.status_code, json.loads(text))
    except ValueError:
        return Reply(response.status_code, text)


# called in the sending thread as each request ends
OnDone = Callable[[StreamRecord], None]


@dataclass(frozen=True)
class LoadRun:
    """One level: every request's record, in the order sent, and the wall time."""

    concurrency: int  # the closed loop's; 0 for an open-loop level
    records: tuple[StreamRecord, ...]
    duration_s: float  # first request sent to last one finished, as vLLM's benchmark_duration
    rate: float | None = None  # the open loop's planned requests/s
    repeated: int = 0  # requests that reused a body


class _Feed:
    """The bodies in order, to threads that ask; with a deadline, cycling through them
    until it passes; without one, each body once."""

    def __init__(self, bodies: Sequence[Body], deadline: float | None) -> None:
        self.bodies, self.deadline = bodies, deadline
        self.sent = 0
        self.lock = threading.Lock()

    def next(self) -> tuple[int, Body] | None:
        with self.lock:
            over = self.sent >= len(self.bodies) if self.deadline is None else self.late()
            if over or not self.bodies:
                return None
            self.sent += 1
            return self.sent - 1, self.bodies[(self.sent - 1) % len(self.bodies)]

    def late(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline

    @property
    def repeated(self) -> int:
        return max(0, self.sent - len(self.bodies))


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
    send = _sender(base_url, path, timeout_s, api_key, ca_bundle, on_done)
    start = time.perf_counter()
    feed = _Feed(bodies, None if duration_s is None else start + duration_s)

    def worker() -> list[tuple[int, StreamRecord]]:
        done = []
        while (item := feed.next()) is not None:
            done.append((item[0], send(item[1])))
        return done

    with ThreadPoolExecutor(concurrency, thread_name_prefix="infergate-load") as pool:
        futures = [pool.submit(worker) for _ in range(concurrency)]
        found = sorted(pair for f in futures for pair in f.result())
    records = tuple(record for _, record in found)
    return LoadRun(concurrency, records, time.perf_counter() - start, repeated=feed.repeated)


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
) -> LoadRun:
    """Send requests at Poisson arrivals of RATE per second, whether or not earlier ones have
    finished, at most POOL_SIZE in flight; each record keeps its planned arrival
    (docs/deploy-and-inference.md#open-loop-levels)."""
    send = _sender(base_url, path, timeout_s, api_key, ca_bundle, on_done)
    start = time.perf_counter()
    feed = _Feed(bodies, None if duration_s is None else start + duration_s)
    futures = []
    with ThreadPoolExecutor(http_session.POOL_SIZE, thread_name_prefix="infergate-open") as pool:
        due = start
        for gap in arrival_gaps(rate, seed):
            due += gap
            time.sleep(max(0.0, due - time.perf_counter()))
            if (item := feed.next()) is None:
                break
            futures.append(pool.submit(send, item[1], due))
        records = tuple(f.result() for f in futures)
    return LoadRun(0, records, time.perf_counter() - start, rate=rate, repeated=feed.repeated)


class _Send(Protocol):
    def __call__(self, body: Body, arrival_s: float | None = None) -> StreamRecord: ...


def _sender(
    base_url: str,
    path: str,
    timeout_s: float,
    api_key: str | None,
    ca_bundle: str | None,
    on_done: OnDone | None,
) -> _Send:
    def send(body: Body, arrival_s: float | None = None) -> StreamRecord:
        record = stream_completion(base_url, path, body, timeout_s, api_key, ca_bundle)
        if arrival_s is not None:
            record = replace(record, arrival_s=arrival_s)
        if on_done is not None:
            on_done(record)
        return record

    return send


def _url(base_url: str, path: str) -> str:
    """`http://head:8000/v1` + `/chat/completions` -> `http://head:8000/v1/chat/completions`."""
    return base_url.rstrip("/") + "/" + path.lstrip("/")


JSON_HEADERS = {"Content-Type": "application/json"}
STREAM_HEADERS = JSON_HEADERS | {"Accept": "text/event-stream, */*"}


def _text(response: Response) -> str:
    return response.content.decode("utf-8", errors="replace")
