"""A real HTTP server on 127.0.0.1 for the selftests of our clients: a JSON reply, a server
run in a thread for the length of a `with`, and a certificate for it to serve TLS with."""

from __future__ import annotations

import json
import shutil
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TypeVar

import pytest

Server = TypeVar("Server", bound=socketserver.BaseServer)


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


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made with openssl in FOLDER; the test skips
    where there is no openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl on this machine to make a certificate with")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key
