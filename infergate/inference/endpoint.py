"""The OpenAI-compatible endpoint the inference tests talk to, and each request's deadline."""

from __future__ import annotations

from argparse import ArgumentTypeError
from dataclasses import dataclass
from urllib.parse import urlsplit

from infergate.plan.apikey import ApiKey
from infergate.plan.model import Inference

REQUEST_TIMEOUT_S = Inference.request_timeout_s  # a stream's whole life, unless planned


@dataclass(frozen=True)
class Endpoint:
    base: str  # http://HOST:PORT, without /v1
    model: str  # the served name the plan expects
    key: ApiKey | None = None
    ca_bundle: str | None = None  # --ca-bundle
    request_s: float = REQUEST_TIMEOUT_S  # each request's deadline: inference.request_timeout_s

    @property
    def v1(self) -> str:
        return f"{self.base}/v1"

    @property
    def api_key(self) -> str | None:
        """The bearer token itself, for the HTTP clients (a property: never in a repr)."""
        return self.key.value if self.key else None


def endpoint_base(given: str) -> str:
    """--endpoint (http://HOST:PORT or .../v1) as Endpoint.base; the error never quotes it:
    a URL may hold a user's password."""
    base = given.rstrip("/").removesuffix("/v1")
    parts = urlsplit(base)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # not a number, or past 65535
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ArgumentTypeError("expected http(s)://HOST:PORT, like http://head:8000 or .../v1")
    if parts.path or parts.query or parts.fragment:
        raise ArgumentTypeError("expected http(s)://HOST:PORT, with /v1 or nothing after it")
    return base
