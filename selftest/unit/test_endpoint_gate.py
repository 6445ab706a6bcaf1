"""The endpoint's root: the inference phase waits for the endpoint up to its deadline, sends
one request, and where that fails there is one red naming the cause, every other inference
test skipped naming it. Each server here is a real one on 127.0.0.1 (selftest/local_http.py);
the refused port is one bound and closed, or bound and not yet listening."""

from __future__ import annotations

import argparse
import socket
import threading
import time
from http.server import ThreadingHTTPServer

import pytest

from infergate.catalogue import ROOT_FORMS, root_check
from infergate.inference import client
from infergate.inference import endpoint_gate as gate
from infergate.inference.endpoint import Endpoint
from infergate.options import endpoint_wait_s
from infergate.waiting import Deadline
from selftest.local_http import JsonHandler, serving
from selftest.suite import PHASE_DIRS, PROJECT_CONFIG, SuiteRun, closed_plan, run_suite

MODEL = "smollm2-135m"  # the lab plan's model.served_name
ROOT_CHECK = "test_conformance.py::test_endpoint_serves_one_request"
CHECK = ROOT_CHECK.rpartition("::")[2]
BODY_500 = "CUDA error: an illegal memory access was encountered (engine core died)"
HEAD = "node1 (127.0.0.1)"  # closed_plan's head
NO_PLAN = ("-o", "infergate_inventory=")  # this clone's ini names the lab's plan: none here


class Scripted(ThreadingHTTPServer):
    status: int  # what every /v1 call answers, 200 for a healthy server
    served: str  # the names /v1/models lists, comma-separated
    calls: list[str]
    # after its first chat answer: "" serves on; "500" answers every call so; "gone" closes
    dies: str = ""


class Handler(JsonHandler):
    """An OpenAI server: /v1/models lists SERVED; a chat request for another model is 404,
    as vLLM answers it; a STATUS other than 200 answers every call."""

    server: Scripted

    def do_GET(self) -> None:
        self.answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer()

    def answer(self) -> None:
        self.server.calls.append(f"{self.command} {self.path}")
        status = self.server.status
        if status == 500:
            return self.reply(500, {"object": "error", "message": BODY_500})
        if status != 200:
            return self.reply(status, {"error": {"message": f"HTTP {status}"}})
        if self.path.endswith("/models"):
            listed = [{"id": name} for name in self.server.served.split(",")]
            return self.reply(200, {"object": "list", "data": listed})
        choice = {"message": {"role": "assistant", "content": "OK"}, "finish_reason": "length"}
        self.reply(200, {"choices": [choice], "usage": {"completion_tokens": 1}})
        if self.server.dies == "500":
            self.server.status = 500
        elif self.server.dies == "gone":  # from another thread: shutdown waits for this one
            threading.Thread(target=closed, args=(self.server,), daemon=True).start()


def closed(httpd: Scripted) -> None:
    httpd.shutdown()
    httpd.server_close()


def scripted(status: int = 200, served: str = MODEL, activate: bool = True) -> Scripted:
    httpd = Scripted(("127.0.0.1", 0), Handler, bind_and_activate=False)
    httpd.status, httpd.served, httpd.calls = status, served, []
    httpd.server_bind()  # bound, not listening: a connection is refused until activated
    if activate:
        httpd.server_activate()
    return httpd


@pytest.fixture
def refused_url() -> str:
    """A port nothing listens on: bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def url_of(httpd: ThreadingHTTPServer, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{httpd.server_address[1]}"


def judged(base: str, seconds: float = 0.5, model: str = MODEL) -> gate.Down | None:
    """Why the endpoint at BASE serves no request; None where it serves MODEL."""
    found = gate.serves_one_request(Endpoint(base, model), Deadline(seconds, gate.WAIT_KEY))
    return None if isinstance(found, Endpoint) and found.model == MODEL else found


# --- the gate on its own, against each kind of server ---------------------------------------


def test_a_refused_port_is_tried_until_the_deadline_and_says_so(refused_url: str) -> None:
    started = time.monotonic()
    down = judged(refused_url, 1.5)
    assert down is not None
    assert 1.4 < time.monotonic() - started < 5
    assert down.code == "IG-ENDPOINT-REFUSED"
    assert down.said.startswith(f"refused the connection to {refused_url}/v1 (tried for 1.")
    assert "of 1.5 s (thresholds.endpoint_wait_s)): ConnectionRefusedError" in down.said
    assert "(timeout" not in down.said  # a refusal waited for no timeout
    assert down.remedy.startswith(f"nothing listens at {refused_url[7:]}: start the server")
    assert "--endpoint-wait SECONDS (thresholds.endpoint_wait_s)" in down.remedy
    assert down.short == "refused the connection"


def test_a_refused_stream_names_no_timeout(refused_url: str) -> None:
    """A refusal is immediate: `(timeout 120 s)` beside it sent operators to the deadline."""
    record = client.stream_completion(f"{refused_url}/v1", "/chat/completions", {}, 120)
    assert record.error == "ConnectionRefusedError: [Errno 111] Connection refused"


def test_the_wait_ends_when_the_server_starts_listening() -> None:
    httpd = scripted(activate=False)

    def listen() -> None:
        httpd.server_activate()
        threading.Thread(target=httpd.serve_forever, daemon=True).start()

    later = threading.Timer(1.0, listen)
    later.start()
    try:
        started = time.monotonic()
        assert judged(url_of(httpd), 30) is None
        assert 0.9 < time.monotonic() - started < 10
        assert httpd.calls == ["GET /v1/models", "POST /v1/chat/completions"]
    finally:
        later.join()
        httpd.shutdown()
        httpd.server_close()


def test_an_http_answer_ends_the_wait_at_once_and_names_the_key() -> None:
    with serving(scripted(401)) as httpd:
        started = time.monotonic()
        down = judged(url_of(httpd), 30)
    assert time.monotonic() - started < 5, "the wait went on after an HTTP answer"
    assert down is not None
    assert down.code == "IG-ENDPOINT-UNAUTHORIZED"
    assert down.said == f"HTTP 401 from {url_of(httpd)}/v1/models with no API key sent: " + (
        "the engine wants a key"
    )
    assert down.remedy.startswith("give the key the engine serves with: `--api-key KEY`")
    assert down.short == "wants an API key (HTTP 401)"


def test_a_5xx_quotes_a_short_bit_of_its_body() -> None:
    with serving(scripted(500)) as httpd:
        down = judged(url_of(httpd))
    assert down is not None
    assert down.code == "IG-ENDPOINT-SERVER-ERROR"
    assert down.said.startswith(f"answered HTTP 500 to GET {url_of(httpd)}/v1/models: ")
    assert BODY_500 in down.said
    assert down.remedy.startswith("the engine failed a one-token request: read its log")


def test_a_server_without_the_planned_name_is_an_unknown_model() -> None:
    with serving(scripted(served="other-model")) as httpd:
        down = judged(url_of(httpd))
    assert down is not None
    assert down.code == "IG-ENDPOINT-UNKNOWN-MODEL"
    assert down.said == (
        f"does not serve '{MODEL}': {url_of(httpd)}/v1/models lists ['other-model']"
    )
    assert down.remedy.startswith(f"the endpoint serves no model named '{MODEL}': launch with")
    assert httpd.calls == ["GET /v1/models"]  # no chat request for a model not served


def test_with_no_model_named_the_one_it_lists_is_tested() -> None:
    with serving(scripted()) as httpd:
        assert judged(url_of(httpd), model="") is None
    assert httpd.calls == ["GET /v1/models", "POST /v1/chat/completions"]


def test_with_no_model_named_two_listed_ask_for_one() -> None:
    with serving(scripted(served=f"{MODEL},other-model")) as httpd:
        down = judged(url_of(httpd), model="")
    assert down is not None
    assert down.code == "IG-ENDPOINT-UNKNOWN-MODEL"
    assert down.said == (
        f"serves 2 models, and none was named: {url_of(httpd)}/v1/models lists "
        f"['{MODEL}', 'other-model']"
    )
    assert down.remedy.startswith("name the model to test: --model NAME")


def test_a_healthy_server_passes_with_one_request() -> None:
    with serving(scripted()) as httpd:
        assert judged(url_of(httpd)) is None
    assert httpd.calls == ["GET /v1/models", "POST /v1/chat/completions"]


def test_a_server_that_never_answers_is_a_timeout_at_the_deadline() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes the connection; nothing ever answers
        started = time.monotonic()
        down = judged(f"http://127.0.0.1:{silent.getsockname()[1]}", 1)
    assert time.monotonic() - started < 5
    assert down is not None
    assert down.code == "IG-ENDPOINT-TIMEOUT", down
    assert down.said.startswith("answered nothing in time (tried for 1.")
    assert down.remedy.startswith("the server took the connection and said nothing")


def test_a_name_that_does_not_resolve_ends_the_wait_at_once() -> None:
    started = time.monotonic()
    down = judged("http://no-such-host.invalid:8000", 30)
    assert time.monotonic() - started < 15
    assert down is not None
    assert down.code == "IG-ENDPOINT-DNS", down


def test_https_to_a_plain_server_is_a_tls_failure() -> None:
    with serving(scripted()) as httpd:
        down = judged(url_of(httpd).replace("http:", "https:"), 30)
    assert down is not None
    assert down.code == "IG-ENDPOINT-TLS", down
    assert down.remedy.startswith("the TLS handshake failed: give its CA with --ca-bundle")


@pytest.mark.parametrize("value", ["-1", "3601", "nan", "inf", "ten"])
def test_an_endpoint_wait_outside_0_to_an_hour_is_refused(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="seconds from 0 to 3600"):
        endpoint_wait_s(value)
    assert endpoint_wait_s("0") == 0.0  # one try, no wait


def test_the_option_overrides_the_plans_wait() -> None:
    assert gate.wait_deadline(None, 10.0) == Deadline(10.0, "thresholds.endpoint_wait_s")
    assert gate.wait_deadline(30.0, 10.0) == Deadline(30.0, "--endpoint-wait")


def test_every_code_the_gate_gives_is_catalogued() -> None:
    codes = {v for k, v in vars(gate).items() if k.isupper() and str(v).startswith("IG-")}
    assert codes - set(ROOT_FORMS) == {"IG-ENDPOINT-DOWN"}
    assert root_check("endpoint") == CHECK


# --- the real suite ---------------------------------------------------------------------------


def inference_run(pytester: pytest.Pytester, base: str, *args: str) -> SuiteRun:
    report = str(pytester.path / "report")
    return run_suite(
        pytester,
        *("-m", "inference", "--endpoint", base, "--endpoint-wait", "1", "--report-dir", report),
        *args,
        inventory=closed_plan(pytester.path),
    )


PARITY_OFF = "set inference.parity.reference"


def assert_one_red(run: SuiteRun) -> str:
    """Exactly one failure, the root's, no error, every other test skipped naming it; its
    message."""
    statuses = {t: o.status for t, o in run.outcomes.items()}
    assert {t: s for t, s in statuses.items() if s != "skipped"} == {ROOT_CHECK: "failed"}, (
        run.output
    )
    # reference parity, off in this plan, is skipped naming that plan fact instead
    others = [o for t, o in run.outcomes.items() if t != ROOT_CHECK and PARITY_OFF not in o.message]
    assert len(others) > 10
    assert all(f"({CHECK})" in o.message for o in others), others
    return run.message(ROOT_CHECK)


def test_a_refused_endpoint_is_one_red_and_every_other_test_skips_naming_it(
    pytester: pytest.Pytester, refused_url: str
) -> None:
    run = inference_run(pytester, refused_url.replace("127.0.0.1", "localhost"))
    message = assert_one_red(run)
    hostport = refused_url[7:].replace("127.0.0.1", "localhost")
    assert f"{hostport}: 1 problem(s)" in message  # away from the head: its own host
    assert "found refused the connection to http://localhost:" in message
    assert f"fix: nothing listens at {hostport}: start the server there" in message
    assert "(timeout" not in run.output
    assert "IG-ENDPOINT-REFUSED" in run.output  # the verdict's line
    skipped = [
        m.message
        for t, m in run.outcomes.items()
        if t != ROOT_CHECK and PARITY_OFF not in m.message
    ]
    assert skipped[0].splitlines()[0] == f"not checked: {hostport} refused the connection ({CHECK})"


def test_a_5xx_at_the_head_is_one_red_naming_the_head_and_quoting_the_body(
    pytester: pytest.Pytester,
) -> None:
    with serving(scripted(500)) as httpd:
        run = inference_run(pytester, url_of(httpd))
    message = assert_one_red(run)
    assert f"{HEAD}: 1 problem(s)" in message
    assert BODY_500 in message
    assert "IG-ENDPOINT-SERVER-ERROR" in run.output


def test_a_healthy_endpoint_passes_the_root(pytester: pytest.Pytester) -> None:
    with serving(scripted()) as httpd:
        run = inference_run(pytester, url_of(httpd), "-k", "serves_one_request or models_lists")
    assert run.outcomes[ROOT_CHECK].status == "passed", run.output
    listed = "test_conformance.py::test_models_lists_the_planned_served_name"
    assert run.outcomes[listed].status == "passed", run.output


@pytest.mark.parametrize("dies", ["500", "gone"])
def test_an_endpoint_lost_mid_run_is_one_red_and_the_later_tests_skip_naming_it(
    pytester: pytest.Pytester, dies: str
) -> None:
    """The engine answers the root's request, then fails every call (HTTP 500), or stops
    listening: the first check to meet it is the one red, and each later check of the
    endpoint's is skipped naming that check and what the endpoint answers now."""
    httpd = scripted()
    httpd.dies = dies
    with serving(httpd):
        run = inference_run(pytester, url_of(httpd))
    assert run.outcomes[ROOT_CHECK].status == "passed", run.output
    red = run.red()
    assert len(red) == 1, run.output
    first = red.pop().rpartition("::")[2]
    later = [
        (t, o) for t, o in run.outcomes.items()
        if o.status == "skipped" and PARITY_OFF not in o.message
    ]  # fmt: skip
    assert len(later) > 10, run.output
    now = "refused the connection" if dies == "gone" else "answered HTTP 500"
    named = f"not checked: {HEAD} stopped serving during the run: {now} ({first})"
    assert all(o.message.startswith(named) for _, o in later), later


def test_an_endpoint_alone_needs_no_plan_and_tests_the_model_it_lists(
    pytester: pytest.Pytester,
) -> None:
    """`infergate smoke --endpoint URL` with no plan: the one model listed is tested; what
    needs the plan's nodes is not run, and says so."""
    some = "serves_one_request or models_lists or baseline"
    with serving(scripted()) as httpd:
        run = run_suite(
            pytester, *NO_PLAN, "-m", "inference", "--endpoint", url_of(httpd), "-k", some
        )
    assert "inventory: none: --endpoint alone runs the inference tests" in run.output
    assert run.outcomes[ROOT_CHECK].status == "passed", run.output
    listed = "test_conformance.py::test_models_lists_the_planned_served_name"
    assert run.outcomes[listed].status == "passed", run.output
    baseline = "test_performance.py::test_performance_holds_against_the_baseline"
    assert run.outcomes[baseline].status == "skipped", run.output
    assert run.message(baseline).startswith("needs a plan (--plan=PATH)"), run.output


def test_an_endpoint_alone_refuses_the_phases_that_check_nodes(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        *PROJECT_CONFIG,
        *NO_PLAN,
        "-m",
        "preflight",
        "--endpoint",
        "http://127.0.0.1:9",
        *PHASE_DIRS,
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert "no plan, and the run selects preflight tests: they check the plan's nodes" in (
        result.stderr.str()
    )


def test_prompts_that_cannot_be_built_are_one_red_and_the_load_skips_naming_it(
    pytester: pytest.Pytester,
) -> None:
    """A server that answers chat but has no tokenizer at /tokenize (a proxy that passes /v1
    alone): the prompts' root fails once; every check of the load is skipped naming it."""
    with serving(scripted()) as httpd:
        run = inference_run(pytester, url_of(httpd), "-k", "test_performance")
    prompts = "test_performance.py::test_load_prompts_are_built"
    assert run.red() == {prompts}, run.output
    assert run.outcomes[prompts].status == "failed", run.output
    message = run.message(prompts)
    assert f"{HEAD}: 1 problem(s)" in message  # the head serves the tokenizer
    assert f"{url_of(httpd)}/tokenize answered 200: no `tokens` list" in message
    assert "let the endpoint through to /tokenize and /detokenize" in message
    others = [o for t, o in run.outcomes.items() if t != prompts]
    assert len(others) > 5, run.output
    assert all("(test_load_prompts_are_built)" in o.message for o in others), others
    assert "IG-PROMPTS-UNBUILT" in run.output, run.output  # the verdict's line
