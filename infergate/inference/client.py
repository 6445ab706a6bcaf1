"""An OpenAI-compatible endpoint as clients see it: HTTP through the endpoint's one session
(infergate.remote.http_session), timed per SSE event.

Each event is stamped when the bytes completing it arrive, as `vllm bench serve` stamps it;
every call has its own deadline (docs/deploy-and-inference.md#timing-per-sse-event).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

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
class Recorder:
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

    def failed(self, error: BaseException, timeout_s: float) -> None:
        """No whole stream: the socket's words, the chunks seen, and the deadline only where
        it ran out (a refused port waited for nothing)."""
        seen = f" after {len(self.times)} content chunk(s)" if self.status == 200 else ""
        self.timed_out = http_session.cause(error) == http_session.TIMEOUT
        timed = f" (timeout {timeout_s:g} s)" if self.timed_out else ""
        self.error = http_session.describe(error) + seen + timed

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
    session = http_session.session_for(base_url, api_key, ca_bundle)
    rec = Recorder(time.perf_counter())
    try:
        with session.post(
            _url(base_url, path),
            streamed(body),
            headers=STREAM_HEADERS,
            timeout=http_session.timeouts(timeout_s),
            stream=True,
        ) as response:
            rec.status = response.status_code
            if response.status_code != 200:
                rec.error = f"HTTP {response.status_code}: {_text(response)[:500]}"
            else:
                record_reads(_reads(response, rec.start_s + timeout_s), rec)
    except http_session.ERRORS as e:
        rec.failed(e, timeout_s)
    return rec.freeze()


def _reads(response: Response, deadline: float) -> Iterator[tuple[bytes, float]]:
    """The body's reads as they arrive, each with its time."""
    while data := http_session.read_some(response, deadline):
        yield data, time.perf_counter()


def record_reads(reads: Iterable[tuple[bytes, float]], rec: Recorder, ended: bool = True) -> None:
    """Split the body into lines by the reads (bytes, time) that brought them; an event is
    timed by the read that brought the line completing it. ENDED: the body is whole, so a
    last line without its newline counts and [DONE] must have come."""
    splitter = EventSplitter()
    pending, last = b"", rec.start_s
    for data, last in reads:
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            _feed(splitter, line + b"\n", rec, last)
    if not ended:
        return
    if pending:  # a last line without its newline
        _feed(splitter, pending, rec, last)
    if event := splitter.flush():
        rec.on_event(event, last)
    if not rec.done and not rec.error:
        rec.error = f"stream ended without `data: [DONE]` after {len(rec.times)} content chunk(s)"


def _feed(splitter: EventSplitter, line: bytes, rec: Recorder, now: float) -> None:
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


def streamed(body: Body) -> bytes:
    """BODY as a streamed request with usage, as vLLM's benchmark asks for it."""
    return json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}).encode()


def _url(base_url: str, path: str) -> str:
    """`http://head:8000/v1` + `/chat/completions` -> `http://head:8000/v1/chat/completions`."""
    return base_url.rstrip("/") + "/" + path.lstrip("/")


JSON_HEADERS = {"Content-Type": "application/json"}
STREAM_HEADERS = JSON_HEADERS | {"Accept": "text/event-stream, */*"}


def _text(response: Response) -> str:
    return response.content.decode("utf-8", errors="replace")
