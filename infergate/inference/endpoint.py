"""The OpenAI-compatible endpoint the inference tests talk to, and each request's deadline."""

from __future__ import annotations

from dataclasses import dataclass

from infergate.plan.apikey import ApiKey

# A stream's whole life: the plan's longest answers at the load's highest concurrency on a
# slow engine take tens of seconds; a request still open after two minutes is a hang.
REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Endpoint:
    base: str  # http://HOST:PORT, without /v1
    model: str  # the served name the plan expects
    key: ApiKey | None = None
    ca_bundle: str | None = None  # --ca-bundle

    @property
    def v1(self) -> str:
        return f"{self.base}/v1"

    @property
    def api_key(self) -> str | None:
        """The bearer token itself, for the HTTP clients (a property: never in a repr)."""
        return self.key.value if self.key else None
