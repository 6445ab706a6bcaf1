"""The head's HTTP API as the deploy asks it: one GET, with the key, under its deadline.

A connection refused or timed out is an answer too (status 0, the socket's reason): a gate
that waits for the API reads it as "not yet", never as an exception.
"""

from __future__ import annotations

from dataclasses import dataclass

from infergate.plan.apikey import ApiKey
from infergate.remote import http_session


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: str


def http_get(
    url: str, timeout_s: float, key: ApiKey | None = None, ca_bundle: str | None = None
) -> HttpAnswer:
    """GET URL (with the key as a bearer token); a refused or timed-out connection reads as
    status 0 with the socket's reason."""
    session = http_session.session_for(url, key.value if key else None, ca_bundle)
    try:
        r = session.get(url, timeout=http_session.timeouts(timeout_s))
    except http_session.ERRORS as e:
        return HttpAnswer(0, str(http_session.reason(e)))
    return HttpAnswer(r.status_code, r.content.decode(errors="replace"))
