"""A lab fault for the OpenAI API: a reverse proxy on this controller's loopback that passes
everything to a real server but takes `usage` out of its streams, as servers that ignore
`stream_options.include_usage` answer (older llama.cpp and Ollama did). Used as
`with usage_stripped("http://10.251.0.11:8000") as url: ...`.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

PASSED_HEADERS = ("Content-Type", "Authorization")


def strip_usage(line: bytes) -> bytes | None:
    """One SSE line with `usage` removed; None drops the line (the usage-only chunk).

    Sample: ``data: {"id":"chatcmpl-1",...,"choices":[],"usage":{"prompt_tokens":12,...}}``
    """
    if not line.startswith(b"data: {"):
        return line
    chunk = json.loads(line[len(b"data: ") :])
    if "usage" not in chunk:
        return line
    if not chunk.get("choices"):
        return None
    del chunk["usage"]
    return b"data: " + json.dumps(chunk).encode() + b"\n"


def _handler(upstream: str) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {h: self.headers[h] for h in PASSED_HEADERS if self.headers[h]}
            conn = http.client.HTTPConnection(target.netloc, timeout=300)
            try:
                conn.request(self.command, self.path, body, headers)
                answer = conn.getresponse()
                self.send_response(answer.status)
                kind = answer.getheader("Content-Type", "")
                self.send_header("Content-Type", kind)
                self.end_headers()  # HTTP/1.0: the body ends when the connection closes
                streamed = kind.startswith("text/event-stream")
                for line in iter(answer.readline, b""):
                    kept = strip_usage(line) if streamed else line
                    if kept is not None:
                        self.wfile.write(kept)
                        self.wfile.flush()
            finally:
                conn.close()

        def log_message(self, *_: object) -> None:
            pass

    return Handler


@contextmanager
def usage_stripped(upstream: str) -> Iterator[str]:
    """The proxy's base URL on 127.0.0.1 while the block runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
