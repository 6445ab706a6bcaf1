"""Every HTTP call the suite makes goes through a `requests.Session` made here, one per
endpoint and key: the deploy readiness gate, the conformance calls and the load client.

No proxy and nothing else from the environment (`trust_env = False`), https always verified,
every call under a (connect, read) timeout, and the key in the Authorization header alone,
which no exception names (docs/internals.md#http-sessions).
"""

from __future__ import annotations

import functools
import os
import socket
import ssl
import stat
import time
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter

MAX_CA_BUNDLE_BYTES = 16 * 1024 * 1024  # certifi's bundle is 0.3 MB
MAX_KEY_CHARS = 8192  # servers refuse a header line past 8 KiB (uvicorn's h11: 16 KiB in all)
CONNECT_S = 10.0  # a reachable endpoint connects in milliseconds; a dead one should not wait
POOL_SIZE = 256  # connections kept per endpoint at most; load levels open their own (load.py)
# what a call can raise: requests' errors are OSErrors, a stream's raw read raises urllib3's
ERRORS = (OSError, urllib3.exceptions.HTTPError)


def session_for(url: str, api_key: str | None, ca_bundle: str | None = None) -> requests.Session:
    """The session for URL's endpoint (scheme, host and port) with this key and CA bundle."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL like http://head:8000/v1")
    return _session(f"{parts.scheme}://{parts.netloc}", api_key, ca_bundle)


@functools.cache
def _session(origin: str, api_key: str | None, ca_bundle: str | None) -> requests.Session:
    """Made once per endpoint, so keep-alive connections are reused as clients reuse them."""
    session = requests.Session()
    session.trust_env = False
    session.verify = ca_bundle or True
    session.headers["Accept-Encoding"] = "identity"  # the bytes as sent, timed as they arrive
    if api_key:
        session.headers["Authorization"] = f"Bearer {api_key}"
    adapter = HTTPAdapter(pool_maxsize=POOL_SIZE)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def key_problem(api_key: str) -> str | None:
    """Why API_KEY cannot be sent as a bearer token, never showing it: a header carries
    printable ASCII only (requests refused a newline unsaid, and a non-Latin-1 one raised)."""
    if len(api_key) > MAX_KEY_CHARS:
        return f"is longer than {MAX_KEY_CHARS} characters: no server reads a header that long"
    if not all("!" <= c <= "~" for c in api_key):
        return "holds a space, a control character or a non-ASCII one: no header can carry it"
    return None


def ca_bundle_problem(path: str) -> str | None:
    """Why PATH cannot be the CA bundle an https endpoint is verified against: no regular
    file, over 16 MiB, or no PEM certificate that OpenSSL loads (else every call read as
    `HTTP 0`)."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file; give a PEM file of CA certificates"
        if info.st_size > MAX_CA_BUNDLE_BYTES:
            return f"larger than {MAX_CA_BUNDLE_BYTES >> 20} MiB: not a CA bundle"
        ssl.create_default_context(cafile=path)
    except ssl.SSLError as e:
        return f"no CA certificate OpenSSL can load ({e.reason or e})"
    except OSError as e:
        return f"cannot read: {e.strerror}"
    return None


def timeouts(timeout_s: float) -> tuple[float, float]:
    """(connect, read) for a call given TIMEOUT_S."""
    return min(CONNECT_S, timeout_s), timeout_s


def read_some(response: requests.Response, deadline: float) -> bytes:
    """The body bytes that have arrived (at least one, or b"" at its end), waiting no later
    than DEADLINE (`time.perf_counter()`). `read1` makes one read of the socket, chunked or
    not: `iter_content(None)` would read a body without chunked framing to its end."""
    raw: Any = response.raw  # urllib3's HTTPResponse
    if raw.connection is not None and raw.connection.sock is not None:
        raw.connection.sock.settimeout(max(deadline - time.perf_counter(), 0.001))
    data: bytes = raw.read1()
    return data


def reason(error: BaseException) -> BaseException:
    """The innermost error: requests wraps urllib3's, which wraps the socket's
    (ConnectionRefusedError, TimeoutError), and that one says what happened."""
    inner = (error.__cause__, getattr(error, "reason", None), *error.args)
    found = next((e for e in inner if isinstance(e, BaseException)), None)
    return reason(found) if found is not None else error


# what kept an answer from coming, as `cause` names it
REFUSED, DNS, TLS, TIMEOUT, CONNECTION = "refused", "dns", "tls", "timeout", "connection"


def cause(error: BaseException) -> str:
    """Why no answer came: the port REFUSED, the name did not resolve (DNS), the TLS
    handshake failed, nothing within the TIMEOUT, or another CONNECTION failure."""
    seen = _chain(error)
    kinds = (
        (TLS, (ssl.SSLError, urllib3.exceptions.SSLError, requests.exceptions.SSLError)),
        (DNS, (socket.gaierror, urllib3.exceptions.NameResolutionError)),
        (REFUSED, (ConnectionRefusedError,)),
        (TIMEOUT, (TimeoutError, requests.Timeout, urllib3.exceptions.TimeoutError)),
    )
    return next((k for k, types in kinds if any(isinstance(e, types) for e in seen)), CONNECTION)


def _chain(error: BaseException) -> list[BaseException]:
    """ERROR and every error it wraps (`reason` follows only the first of each)."""
    found: list[BaseException] = []
    todo = [error]
    while todo:
        e = todo.pop()
        if any(e is f for f in found):
            continue
        found.append(e)
        inner = (e.__cause__, e.__context__, getattr(e, "reason", None), *e.args)
        todo += [i for i in inner if isinstance(i, BaseException)]
    return found


def describe(error: BaseException) -> str:
    """`ConnectionRefusedError: [Errno 111] Connection refused`, as the socket said it."""
    cause = reason(error)
    return f"{type(cause).__name__}: {cause or 'no detail'}"
