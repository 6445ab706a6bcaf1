"""A loopback OpenAI server that streams on a known schedule, for measuring load clients
apart from any engine: each request's first token TTFT after its body arrived, then one token
every ITL, then a usage chunk and `data: [DONE]`, as vLLM frames a chat or text completion
stream (HTTP/1.1, chunked, keep-alive). It stamps every event as it writes it, on the
machine's monotonic clock (the clients' `time.perf_counter()`), and counts the streams open
at once, so a client's error can be told apart from the server's own.

    python -m infergate_lab.token_server --ttft-ms 100 --itl-ms 50 --tokens 16 --stamps F

It prints `listening PORT` once ready; on SIGTERM or SIGINT it writes its stamps to F (JSON:
the schedule, `held_max`, and per request `received` and `sent`) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class Schedule:
    ttft_s: float
    itl_s: float
    tokens: int


@dataclass
class Served:
    """One request as the server handled it: when its body was read, when each token's
    event was written."""

    received: float
    sent: list[float] = field(default_factory=list)


class TokenServer:
    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.served: list[Served] = []
        self.open = 0
        self.held_max = 0

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # a client gone, or the server stopping with the connection idle
        ended = (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError)
        with contextlib.suppress(*ended):
            while head := await reader.readuntil(b"\r\n\r\n"):
                request_line, *headers = head.decode("latin-1").split("\r\n")
                size = _content_length(headers)
                body = await reader.readexactly(size)
                path = request_line.split(" ")[1]
                if path.endswith("/models"):
                    await self._models(writer)
                else:
                    await self._stream(writer, path, json.loads(body or b"{}"))
        writer.close()

    async def _models(self, writer: asyncio.StreamWriter) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "token-server", "object": "model"}]})
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        await writer.drain()

    async def _stream(self, writer: asyncio.StreamWriter, path: str, body: Json) -> None:
        loop = asyncio.get_running_loop()
        served = Served(time.perf_counter())
        self.served.append(served)
        self.open += 1
        self.held_max = max(self.held_max, self.open)
        chat = path.endswith("/chat/completions")
        tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
        tokens = tokens or self.schedule.tokens
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        start = loop.time()
        try:
            token = TOKEN_EVENTS[chat]
            for k in range(tokens):
                due = start + self.schedule.ttft_s + k * self.schedule.itl_s
                await asyncio.sleep(max(0.0, due - loop.time()))
                writer.write(token)
                served.sent.append(time.perf_counter())
                if writer.transport.get_write_buffer_size() > 65536:
                    await writer.drain()
            end: dict[str, object] = {"delta": {}} if chat else {"text": ""}
            last = {"index": 0, "finish_reason": "length", **end}
            writer.write(_event_bytes({"id": "cmpl-1", "choices": [last]}))
            usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}
            writer.write(_event_bytes({"id": "cmpl-1", "choices": [], "usage": usage}))
            writer.write(_framed(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
        finally:
            self.open -= 1

    def stamps(self) -> Json:
        return {
            "schedule": asdict(self.schedule),
            "held_max": self.held_max,
            "requests": [asdict(s) for s in self.served],
        }


def _content_length(headers: list[str]) -> int:
    found = [h.split(":", 1)[1] for h in headers if h.lower().startswith("content-length:")]
    return int(found[0]) if found else 0


def _framed(data: bytes) -> bytes:
    """DATA as one chunk of a chunked body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event_bytes(chunk: Json) -> bytes:
    return _framed(f"data: {json.dumps(chunk)}\n\n".encode())


# a token's event, made once (a chat's or a text completion's): the server's own cost per
# token is one write, so that it stays on time at a thousand streams
TOKEN_EVENTS = {
    chat: _event_bytes(
        {"id": "cmpl-1", "choices": [{"index": 0, "delta": {"content": "tok "}}]}
        if chat
        else {"id": "cmpl-1", "choices": [{"index": 0, "text": "tok "}]}
    )
    for chat in (True, False)
}


async def serve(schedule: Schedule, port: int, stamps: Path) -> None:
    server = TokenServer(schedule)
    listener = await asyncio.start_server(server.connection, "127.0.0.1", port, backlog=4096)
    print(f"listening {listener.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    await stop.wait()
    listener.close()
    stamps.write_text(json.dumps(server.stamps()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ttft-ms", type=float, default=100)
    parser.add_argument("--itl-ms", type=float, default=50)
    parser.add_argument("--tokens", type=int, default=16, help="where a request sets no max_tokens")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stamps", type=Path, required=True)
    args = parser.parse_args()
    schedule = Schedule(args.ttft_ms / 1e3, args.itl_ms / 1e3, args.tokens)
    asyncio.run(serve(schedule, args.port, args.stamps))


if __name__ == "__main__":
    main()
