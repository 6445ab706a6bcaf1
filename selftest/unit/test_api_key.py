"""The API key: where it comes from, that every HTTP call carries it, that a 401 fails the
readiness gate at once saying where to give the key, and that no text the suite keeps or
prints shows it. The server is a real one on 127.0.0.1 that wants a bearer token, as vLLM
started with `--api-key` does."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from infergate.deploy.api import http_get
from infergate.deploy.executor import Deployment
from infergate.deploy.failure import LaunchFailed
from infergate.deploy.state import DeployOptions, NodeIo
from infergate.engines.launch import HttpReady, Launch
from infergate.fixtures.inventory import load_inventory
from infergate.inference import client
from infergate.inference.conformance import check_answer, check_models
from infergate.plan.apikey import (
    HIDDEN,
    ApiKey,
    check_authorized,
    engine_keys,
    flags_without_key,
    redact,
    resolve_api_key,
)
from infergate.plan.model import parse_inventory
from infergate.remote.ssh import Ran
from infergate.waiting import Deadline
from selftest.local_http import JsonHandler, serving
from selftest.suite import ROOT, closed_plan, run_suite

KEY = "sk-lab-4f9e2a71c0"
HEAD = "node1 (10.251.0.11)"
# vLLM 0.32 logs its arguments at start-up, the key among them (cf. the non-default args
# line of selftest/data/deploy/vllm-tp2-node1.log)
ARGS_LINE = (
    "(APIServer pid=1) INFO 11-30 10:00:01 [utils.py:253] non-default args: "
    f"{{'model_tag': '/srv/models/tiny-qwen3-moe', 'api_key': ['{KEY}'], 'max_model_len': 1024}}"
)


# --- where the key comes from -------------------------------------------------------------

FLAGS = ("--max-model-len", "1024", "--api-key", "from-flags", "--enforce-eager")


def test_the_option_comes_first_then_the_environment_then_the_plan() -> None:
    env = {"INFERGATE_API_KEY": "from-infergate", "OPENAI_API_KEY": "from-openai"}
    plan_env = {"VLLM_API_KEY": "from-vllm-env"}
    chosen = [
        resolve_api_key("from-option", env, FLAGS, plan_env),
        resolve_api_key(None, env, FLAGS, plan_env),
        resolve_api_key(None, {"OPENAI_API_KEY": "from-openai"}, FLAGS, plan_env),
        resolve_api_key("", {"INFERGATE_API_KEY": ""}, FLAGS, plan_env),
        resolve_api_key(None, {}, (), plan_env),
    ]
    assert [(k.value, k.source) for k in chosen if k] == [
        ("from-option", "--api-key"),
        ("from-infergate", "INFERGATE_API_KEY"),
        ("from-openai", "OPENAI_API_KEY"),
        ("from-flags", "engine.flags --api-key"),  # an empty value counts as none
        ("from-vllm-env", "engine.env.VLLM_API_KEY"),
    ]
    assert resolve_api_key(None, {"PATH": "/bin"}, ("--max-model-len", "1024"), {}) is None


def test_a_key_the_head_sets_itself_is_named_at_the_heads_own_key() -> None:
    """A remedy that says "unset engine.env.VLLM_API_KEY" to a plan whose head sets it in
    its own env sends the operator to the wrong line."""
    plan = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    plan["nodes"][0]["env"] = {"VLLM_API_KEY": "from-the-head"}
    inventory = parse_inventory(plan)
    head = inventory.head
    key = resolve_api_key(None, {}, (), inventory.node_env(head), head.key_of("env.VLLM_API_KEY"))
    assert key is not None
    assert (key.value, key.source) == ("from-the-head", "nodes[0].env.VLLM_API_KEY")


def test_the_plan_key_is_read_in_every_form_the_engines_take() -> None:
    forms = [
        ("--api-key", "k1"),
        ("--api-key=k1",),
        ("--api_key", "k1"),  # vLLM reads underscores as dashes
        ("--api-key", "k1", "k2", "--port", "8000"),  # vLLM serves several keys
    ]
    assert [[k.value for k in engine_keys(f, {})] for f in forms] == [
        ["k1"],
        ["k1"],
        ["k1"],
        ["k1", "k2"],
    ]


def test_a_key_never_shows_in_its_repr_and_hides_the_keys_it_overrides() -> None:
    key = resolve_api_key(None, {"OPENAI_API_KEY": "sk-cloud-key"}, FLAGS, {})
    assert key is not None
    assert "sk-cloud-key" not in repr(key) + str(key)
    assert "from-flags" not in repr(key) + str(key)
    assert key.source in repr(key)
    assert set(key.secrets()) == {"sk-cloud-key", "from-flags"}
    assert key.header() == {"Authorization": "Bearer sk-cloud-key"}


def test_the_baseline_flags_leave_the_key_out() -> None:
    assert flags_without_key(FLAGS) == ("--max-model-len", "1024", "--enforce-eager")
    assert flags_without_key(("--api-key=k", "--api-key", "1024", "--x")) == ("--x",)


def test_redact_replaces_every_secret() -> None:
    assert redact(ARGS_LINE, [KEY]).count(HIDDEN) == 1
    assert KEY not in redact(ARGS_LINE, [KEY])
    assert redact("a-key a-key-longer", ["a-key", "a-key-longer"]) == f"{HIDDEN} {HIDDEN}"


# --- the 401 judge ------------------------------------------------------------------------


def test_401_without_a_key_says_the_engine_wants_one_and_where_to_give_it() -> None:
    [problem] = check_authorized(401, "http://h:8000/v1/models", None)
    assert problem.found == (
        "HTTP 401 from http://h:8000/v1/models with no API key sent: the engine wants a key"
    )
    assert "`--api-key KEY`, or INFERGATE_API_KEY" in problem.remedy
    assert "VLLM_API_KEY in engine.env" in problem.remedy


def test_401_with_a_key_names_its_source_never_the_key() -> None:
    key = resolve_api_key(None, {"INFERGATE_API_KEY": KEY}, FLAGS, {})
    [problem] = check_authorized(403, "http://h:8000/v1/models", key)
    assert "the engine rejected the API key sent (from INFERGATE_API_KEY)" in problem.found
    assert problem.remedy.endswith(
        "it overrides a different key from engine.flags --api-key: unset INFERGATE_API_KEY "
        "to send that"
    )
    assert KEY not in problem.describe()
    assert "from-flags" not in problem.describe()
    assert check_authorized(200, "http://h:8000/v1/models", key) == []
    assert check_authorized(404, "http://h:8000/v1/models", None) == []


# --- a real server that wants a key -------------------------------------------------------


class KeyedServer(ThreadingHTTPServer):
    seen: list[str | None]  # the Authorization header of each request


class Keyed(JsonHandler):
    """vLLM's authentication: /v1 wants `Bearer KEY`, /health does not."""

    server: KeyedServer

    def do_GET(self) -> None:
        self.server.seen.append(self.headers.get("Authorization"))
        if self.path.startswith("/v1") and self.headers.get("Authorization") != f"Bearer {KEY}":
            return self.reply(401, {"error": "Unauthorized"})
        self.reply(200, {"object": "list", "data": [{"id": "smollm2-135m"}]})


@pytest.fixture
def server() -> Iterator[str]:
    httpd = KeyedServer(("127.0.0.1", 0), Keyed)
    httpd.seen = []
    with serving(httpd):
        yield f"http://127.0.0.1:{httpd.server_address[1]}"


def test_every_client_sends_the_key(server: str) -> None:
    key = ApiKey(KEY, "--api-key")
    assert http_get(f"{server}/v1/models", 5).status == 401
    assert http_get(f"{server}/v1/models", 5, key).status == 200
    assert client.get_json(f"{server}/v1", "/models", 5, key.value)[0] == 200


def local_io(node: str, command: str, timeout_s: float, input: str | None = None) -> Ran:
    """This machine's shell as a node's: the gate's I/O without SSH."""
    done = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, timeout=timeout_s, input=input
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def echo_key(node: str, command: str, timeout_s: float, input: str | None = None) -> Ran:
    """A node whose every answer shows the key, as `docker logs` and `docker inspect` do."""
    return local_io(node, f"echo {KEY}", timeout_s, input)


def gated(base: str, key: ApiKey | None, said: list[str], io: NodeIo = local_io) -> Deployment:
    """A deployment whose only step is the readiness gate, on the server, 300 s to pass."""
    gate = HttpReady("API ready", ("/health", "/v1/models"), Deadline(300, "thresholds.x"))
    launch = Launch("vllm", "run1", base, "smollm2-135m", {"node1": "c1"}, (gate,), ())
    nodes = {n.name: n for n in load_inventory(ROOT / "inventories" / "lab.yaml").nodes}
    options = DeployOptions(api_key=key)
    return Deployment(launch, {"node1": nodes["node1"]}, io, said.append, options)


@pytest.mark.parametrize(
    ("key", "found"),
    [
        (None, " with no API key sent: the engine wants a key"),
        (
            ApiKey("wrong-key-123", "--api-key"),
            ": the engine rejected the API key sent (from --api-key)",
        ),
    ],
    ids=["withheld", "wrong"],
)
def test_the_gate_fails_at_the_first_401(server: str, key: ApiKey | None, found: str) -> None:
    deployment = gated(server, key, [])
    deployment.watches["node1"].lines.append(ARGS_LINE)  # the head's log, in the failure
    started = time.monotonic()
    with pytest.raises(LaunchFailed) as failed:
        deployment.perform()
    assert time.monotonic() - started < 5, "the gate waited on a 401 for its deadline"
    message = str(failed.value)
    assert f"{HEAD}: 1 problem(s)" in message
    assert f"found HTTP 401 from {server}/v1/models{found}" in message
    assert "fix: give the key the engine serves with: `--api-key KEY`" in message
    assert "wrong-key-123" not in message


def test_the_gate_passes_with_the_key_and_hides_it_in_what_it_says(server: str) -> None:
    said: list[str] = []
    deployment = gated(server, ApiKey(KEY, "--api-key"), said)
    deployment.perform()
    assert deployment.get("/v1/models", 5).status == 200
    deployment.say(f"echo of {ARGS_LINE}")
    assert [ln for ln in said if KEY in ln] == []
    assert deployment.io("node1", f"echo {KEY}", 5).stdout == f"{HIDDEN}\n"


def test_the_failure_and_the_evidence_hide_the_key(server: str, tmp_path: Path) -> None:
    key = ApiKey("wrong-key-123", "--api-key", (ApiKey(KEY, "engine.flags --api-key"),))
    deployment = gated(server, key, [], echo_key)
    deployment.watches["node1"].lines.append(ARGS_LINE)
    deployment.evidence = tmp_path
    with pytest.raises(LaunchFailed) as failed:
        deployment.perform()
    assert HIDDEN in str(failed.value)
    assert KEY not in str(failed.value)
    deployment.save_evidence()
    written = [p.read_text() for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) == 3
    assert all(KEY not in text for text in written), written


# --- the suite against a server that refuses it ---------------------------------------------

ROOT_CHECK = "test_conformance.py::test_endpoint_serves_one_request"


def test_endpoint_that_refuses_the_suite_is_one_red_and_the_rest_skip_naming_it(
    server: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "wrong-key-123")
    monkeypatch.delenv("INFERGATE_API_KEY", raising=False)
    run = run_suite(
        pytester,
        "-m",
        "inference",
        "--endpoint",
        f"{server}/v1",
        "--report-dir",
        str(pytester.path / "report"),
        "-k",
        "conformance",
        inventory=closed_plan(pytester.path),
    )
    assert run.red() == {ROOT_CHECK}, run.output
    message = run.message(ROOT_CHECK)
    assert "node1 (127.0.0.1)" in message  # the head
    assert f"HTTP 401 from {server}/v1/models: the engine rejected the API key sent " in message
    assert "(from OPENAI_API_KEY)" in message
    assert "fix: give the key the engine serves with: `--api-key KEY`" in message
    assert "wrong-key-123" not in run.output
    others = [o for t, o in run.outcomes.items() if t != ROOT_CHECK]
    assert others
    assert all(o.status == "skipped" for o in others), run.output
    assert all("refused the API key (HTTP 401)" in o.message for o in others)


def test_a_refused_inference_call_says_where_to_give_the_key() -> None:
    [models] = check_models(401, {"error": "Unauthorized"}, "smollm2-135m")
    [answer] = check_answer("/chat/completions", 403, {"error": "Forbidden"})
    assert all("`--api-key KEY`, or INFERGATE_API_KEY" in p.remedy for p in (models, answer))
    [missing] = check_models(200, {"data": []}, "smollm2-135m")
    assert "--api-key" not in missing.remedy


def test_help_names_where_the_key_may_come_from(pytester: pytest.Pytester) -> None:
    config = ["-c", str(ROOT / "pytest.ini"), "--rootdir", str(ROOT), "-p", "no:cacheprovider"]
    result = pytester.runpytest_subprocess(*config, "--help", str(ROOT / "tests_deploy"))
    text = " ".join(result.stdout.str().split())
    option = text[text.index("--api-key=KEY") :][:600]
    for source in ("$INFERGATE_API_KEY", "$OPENAI_API_KEY", "engine.flags", "VLLM_API_KEY"):
        assert source in option, option
