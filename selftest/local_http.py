"""A real HTTP server on 127.0.0.1 for the selftests of our clients: a JSON reply, and a
server run in a thread for the length of a `with`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

Server = TypeVar("Server", bound=ThreadingHTTPServer)


class JsonHandler(BaseHTTPRequestHandler):
    """A handler that answers JSON and keeps the test output quiet."""

    def log_message(self, *_: object) -> None:
        pass

    def reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serving(httpd: Server) -> Iterator[Server]:
    """Serve in a daemon thread; shut down and closed on leaving."""
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
