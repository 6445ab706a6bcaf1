"""The endpoint's gate: wait until it answers HTTP (GET /v1/models), then send one chat
request. What failed is one `Down`, each cause with its own code and a remedy that leads with
that cause; the inference checks that need the endpoint are then skipped, naming it, so no
judge ever reads an error's text as the model's output (docs/suite.md#the-endpoint-root).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from infergate.inference.client import Reply, call
from infergate.inference.endpoint import Endpoint
from infergate.inference.plan import CHAT_PATH, chat_body
from infergate.plan.apikey import check_authorized
from infergate.remote import http_session
from infergate.waiting import Clock, Deadline, WaitTimedOut, wait_until

# each cause's code (infergate.catalogue: ROOT_FORMS); DOWN, the check's own, for the rest
DOWN, REFUSED, DNS = "IG-ENDPOINT-DOWN", "IG-ENDPOINT-REFUSED", "IG-ENDPOINT-DNS"
TLS, TIMEOUT = "IG-ENDPOINT-TLS", "IG-ENDPOINT-TIMEOUT"
UNAUTHORIZED, UNKNOWN_MODEL = "IG-ENDPOINT-UNAUTHORIZED", "IG-ENDPOINT-UNKNOWN-MODEL"
SERVER_ERROR = "IG-ENDPOINT-SERVER-ERROR"
POLL_S = 0.5  # between tries while the port refuses
LOST_WAIT_S, LOST_REQUEST_S = 5.0, 30.0  # `lost`'s: the endpoint had served this run
QUOTED = 160  # characters of a reply's body a failure quotes
PROMPT = "Say OK."
MAX_WAIT_S = 3600.0  # --endpoint-wait's and thresholds.endpoint_wait_s's most
WAIT_OPTION, WAIT_KEY = "--endpoint-wait", "thresholds.endpoint_wait_s"
WAIT_LONGER = f"if it is still starting, wait longer: {WAIT_OPTION} SECONDS ({WAIT_KEY})"
# no wait mends these: the wait ends at the first
FINAL = (http_session.DNS, http_session.TLS)


@dataclass(frozen=True)
class Down:
    """Why the endpoint serves no request: its CODE, what was SAID (with the URL), the
    REMEDY leading with that cause, and SHORT, the cause in a few words for the skips."""

    code: str
    said: str
    remedy: str
    short: str


def wait_deadline(given: float | None, planned: float) -> Deadline:
    """How long to wait for the endpoint: --endpoint-wait where GIVEN, else the plan's."""
    return Deadline(planned, WAIT_KEY) if given is None else Deadline(given, WAIT_OPTION)


def serves_one_request(endpoint: Endpoint, deadline: Deadline) -> Endpoint | Down:
    """The endpoint, where it answers GET /v1/models listing its model (the one it lists,
    where none was named) within DEADLINE, then one chat request with text within its
    request deadline; else why not."""
    reply, last = wait_for_answer(endpoint, deadline)
    if reply.status == 0:
        return no_answer(endpoint, reply, last)
    url = f"{endpoint.v1}/models"
    down = http_failure(endpoint, f"GET {url}", reply)
    if down is not None:
        return down
    listed = listed_models(reply)
    if not endpoint.model and len(listed) == 1:
        endpoint = replace(endpoint, model=listed[0])
    if endpoint.model not in listed:
        return unlisted(endpoint, url, listed)
    body = json.dumps(chat_body(endpoint.model, PROMPT, 1))
    key, ca = endpoint.api_key, endpoint.ca_bundle
    answer = call("POST", endpoint.v1, CHAT_PATH, body, endpoint.request_s, key, ca)
    if answer.status == 0:
        timed = answer.cause == http_session.TIMEOUT
        return no_answer(
            endpoint, answer, f"one request's {endpoint.request_s:g} s" if timed else ""
        )
    return http_failure(endpoint, f"POST {endpoint.v1}{CHAT_PATH}", answer) or (
        textless(answer) or endpoint
    )


def lost(endpoint: Endpoint) -> Down | None:
    """Why an endpoint that served at the start of the run serves no request now; None where
    it still does. A live engine answers one token at once, even after a load."""
    wait = Deadline(LOST_WAIT_S, "endpoint_gate.LOST_WAIT_S")
    asked = replace(endpoint, request_s=min(endpoint.request_s, LOST_REQUEST_S))
    found = serves_one_request(asked, wait)
    return found if isinstance(found, Down) else None


def wait_for_answer(endpoint: Endpoint, deadline: Deadline) -> tuple[Reply, str]:
    """GET /v1/models until any HTTP answer, a DNS or TLS failure, or DEADLINE: the last
    reply, and how long was waited (`10.0 s of 10 s (thresholds.endpoint_wait_s)`)."""
    clock = deadline.start()
    seen: list[Reply] = []

    def probe() -> tuple[Reply | None, str]:
        per_call = max(1.0, min(http_session.CONNECT_S, clock.left()))
        key, ca = endpoint.api_key, endpoint.ca_bundle
        seen.append(call("GET", endpoint.v1, "/models", None, per_call, key, ca))
        done = seen[-1].status != 0 or seen[-1].cause in FINAL
        return (seen[-1] if done else None), str(seen[-1].body)

    try:
        return wait_until(probe, f"{endpoint.base} answering HTTP", clock, POLL_S), ""
    except WaitTimedOut as e:
        return seen[-1], waited(clock, e)


def waited(clock: Clock, timed_out: WaitTimedOut) -> str:
    return f"{timed_out.waited_s:.1f} s of {clock.deadline}"


def no_answer(endpoint: Endpoint, reply: Reply, waited_for: str) -> Down:
    """No HTTP answer: refused, a name that does not resolve, TLS, or nothing in time;
    WAITED_FOR: how long it was tried, where that says more than the error."""
    hostport = origin(endpoint.base)
    why = str(reply.body).removeprefix(f"no answer from {endpoint.v1}: ")
    tried = f" (tried for {waited_for})" if waited_for else ""
    if reply.cause == http_session.REFUSED:
        said = f"refused the connection to {endpoint.v1}{tried}: {why}"
        fix = f"nothing listens at {hostport}: start the server there, or point --endpoint at "
        return Down(
            REFUSED, said, fix + f"the one that serves; {WAIT_LONGER}", "refused the connection"
        )
    if reply.cause == http_session.DNS:
        said = f"has a host name that does not resolve ({endpoint.v1}): {why}"
        fix = f"{hostport}: the name is not in DNS or /etc/hosts here: fix --endpoint's host"
        return Down(DNS, said, fix, "has a host name that does not resolve")
    if reply.cause == http_session.TLS:
        said = f"failed the TLS handshake of {endpoint.v1}: {why}"
        fix = "the TLS handshake failed: give its CA with --ca-bundle PATH, or http:// for a "
        return Down(TLS, said, fix + "server that speaks plain HTTP", "failed the TLS handshake")
    if reply.cause == http_session.TIMEOUT:
        said = f"answered nothing in time{tried}: {why}"
        fix = "the server took the connection and said nothing: the engine is hung or still "
        return Down(
            TIMEOUT, said, fix + f"loading: read its log; {WAIT_LONGER}", "answered nothing in time"
        )
    said = f"gave no answer at {endpoint.v1}{tried}: {why}"
    return Down(DOWN, said, f"what the error names; {WAIT_LONGER}", "gave no answer")


def http_failure(endpoint: Endpoint, request: str, reply: Reply) -> Down | None:
    """An HTTP answer that is no success: the key refused, no such model, the engine's own
    failure (its body quoted), or another status."""
    url = request.partition(" ")[2]
    if refused := check_authorized(reply.status, url, endpoint.key):
        said = refused[0].found
        head = "refused the API key" if endpoint.key else "wants an API key"
        return Down(UNAUTHORIZED, said, refused[0].remedy, f"{head} (HTTP {reply.status})")
    if reply.status == 200:
        return None
    said = f"answered HTTP {reply.status} to {request}: {quote(reply.body)}"
    brief = f"answered HTTP {reply.status}"
    if reply.status == 404 and request.startswith("POST"):
        return Down(UNKNOWN_MODEL, said, unknown_model_fix(endpoint.model), brief)
    if reply.status >= 500:
        fix = "the engine failed a one-token request: read its log at this time (the body "
        return Down(SERVER_ERROR, said, fix + "quoted is what it said)", brief)
    return Down(DOWN, said, "the status and body quoted name the fix", brief)


def listed_models(reply: Reply) -> list[str]:
    """The model ids a GET /v1/models answer lists."""
    data = reply.body.get("data") if isinstance(reply.body, dict) else None
    return [str(m.get("id")) for m in data or [] if isinstance(m, dict)]


def unlisted(endpoint: Endpoint, url: str, listed: list[str]) -> Down:
    """GET /v1/models answered without the planned served name, or, with none named, with
    other than one model to choose."""
    if not endpoint.model:
        said = f"serves {len(listed)} models, and none was named: {url} lists {listed}"
        fix = "name the model to test: --model NAME (or the plan's model.served_name)"
        return Down(UNKNOWN_MODEL, said, fix, f"serves {len(listed)} models, none named")
    said = f"does not serve {endpoint.model!r}: {url} lists {listed}"
    brief = f"does not serve {endpoint.model!r}"
    return Down(UNKNOWN_MODEL, said, unknown_model_fix(endpoint.model), brief)


def textless(reply: Reply) -> Down | None:
    """A 200 to the chat request that holds no choice: no answer a client can read."""
    choices = reply.body.get("choices") if isinstance(reply.body, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return None
    said = f"answered the chat request with no choice: {quote(reply.body)}"
    return Down(DOWN, said, "an OpenAI-compatible server at --endpoint", "answered no choice")


def unknown_model_fix(model: str) -> str:
    return (
        f"the endpoint serves no model named {model!r}: launch with `--served-model-name "
        f"{model}`, or test a name GET /v1/models lists (--model NAME, or model.served_name)"
    )


def quote(body: object) -> str:
    """A short bit of a reply's body, as received."""
    text = body if isinstance(body, str) else json.dumps(body)
    text = " ".join(text.split())
    return repr(text[:QUOTED] + ("..." if len(text) > QUOTED else ""))


def origin(base: str) -> str:
    """`host:port` of an http(s) URL (the scheme's port where none is given)."""
    parts = urlsplit(base)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"
