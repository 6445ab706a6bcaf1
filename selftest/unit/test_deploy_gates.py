"""The API gate asks the head at most once a second, however often its log wakes the wait:
SGLang logs every request it answers, so each 503 of /health_generate woke the wait again
at once, and a TP 2 launch in the lab was asked 12,913 times in its 42 s of warm-up (its
head's log, selftest/data/deploy/sglang-tp2-node1.log, keeps the first and last lines)."""

from __future__ import annotations

from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from infergate.deploy import gates
from infergate.deploy.api import HttpAnswer
from infergate.deploy.failure import LaunchFailed
from infergate.deploy.gates import check_served
from infergate.deploy.state import DeployOptions, LaunchState
from infergate.engines.launch import HttpReady, Launch
from infergate.fixtures.inventory import load_inventory
from infergate.waiting import Deadline
from selftest.local_http import JsonHandler, serving
from selftest.unit.test_api_key import local_io

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 2.5


class Warming(JsonHandler):
    """SGLang's head before its warm-up ends: /health_generate answers 503."""

    asked = 0

    def do_GET(self) -> None:
        type(self).asked += 1
        self.reply(503, {"detail": "warming up"})


def test_a_log_line_per_request_does_not_make_the_api_gate_ask_faster() -> None:
    gate = HttpReady("API ready", ("/health_generate", "/v1/models"), Deadline(DEADLINE_S, "t.r"))
    nodes = {n.name: n for n in load_inventory(ROOT / "inventories" / "lab.yaml").nodes}
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Warming)) as httpd:
        endpoint = f"http://127.0.0.1:{httpd.server_address[1]}"
        launch = Launch("sglang", "run1", endpoint, "m", {"node1": "c1"}, (gate,), ())
        d = LaunchState(
            launch, {"node1": nodes["node1"]}, local_io, lambda _: None, DeployOptions()
        )
        d.wait_for_news = lambda seconds: None  # type: ignore[method-assign]  # a line at once
        with pytest.raises(LaunchFailed, match="API ready") as failed:
            gates.wait_for(d, gate)
    # one GET a second from the start, and the last at the deadline
    assert 2 <= Warming.asked <= DEADLINE_S + 2, Warming.asked
    assert "GET /health_generate: 503" in str(failed.value)


def test_the_served_model_is_judged_from_the_models_answer() -> None:
    listed = '{"data": [{"id": "tiny"}]}'
    assert check_served(HttpAnswer(200, listed), "tiny") == []
    (wrong,) = check_served(HttpAnswer(200, listed), "other")
    assert (wrong.found, wrong.planned) == (
        "GET /v1/models: 200, models ['tiny']",
        "200 listing 'other'",
    )
    (refused,) = check_served(HttpAnswer(0, "connection refused"), "tiny")
    assert refused.found == "GET /v1/models: connection refused, models []"
