"""tests_inference against a real vLLM started outside the suite (`--endpoint`): green when
the server is right, and red for the right reason with each defect we can really produce:
the plan's served name not served, streams without usage, the server dying mid-run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from infergate.inference.client import post_json
from infergate.inference.workload import build_prompts
from infergate.reports.files import level_slug
from infergate.reports.inference_json import read_results
from infergate_lab import Lab
from infergate_lab.engine import serving_alone
from infergate_lab.usage_proxy import usage_stripped
from selftest.browser import check_page
from selftest.suite import ROOT, SuiteRun, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

SERVED = "smollm2-135m"  # inventories/lab.yaml's model.served_name
PORT = 18433
CONTAINER = "outside-the-suite"
MODELS = "test_conformance.py::test_models_lists_the_planned_served_name"
STREAMS = {f"test_conformance.py::test_stream_is_framed_and_ends_with_usage[{p}]"
           for p in ("chat", "text")}  # fmt: skip
USAGE = "test_performance.py::test_usage_counts_the_streamed_tokens"
COMPLETES = {c: f"test_performance.py::test_every_request_completes[c={c}]" for c in (1, 4, 16)}


@pytest.fixture(scope="module")
def server(engine: object, lab: Lab) -> Iterator[str]:
    """SmolLM2 served alone on node1 by `docker run`, outside any suite run."""
    with serving_alone(lab, "node1", SERVED, PORT, CONTAINER) as base:
        yield base


def smoke(pytester: pytest.Pytester, url: str, *args: str, inventory: Path | None = None):
    report = pytester.path / "report"
    return run_suite(pytester, "-m", "inference", "--endpoint", f"{url}/v1",
                     "--report-dir", str(report), *args, inventory=inventory)  # fmt: skip


GOODPUT = "test_performance.py::test_goodput_meets_the_slo[c=1]"
OPEN_LOOP = "test_performance.py::test_every_request_completes[4 req/s]"


def test_external_endpoint_green_with_a_report(server, pytester, lab, tmp_path):
    plan = tmp_path / "plan.yaml"  # an SLO any server that answers meets: the gate runs green
    text = (ROOT / "inventories" / "lab.yaml").read_text()
    more = "  slo: {e2e_ms: 600000, min_goodput_fraction: 1}\n  request_rates: [4]\n"
    plan.write_text(text.replace("\ninference:\n", f"\ninference:\n{more}"))
    run = smoke(pytester, server, inventory=plan)
    assert run.red() == set(), run.output
    assert run.outcomes[GOODPUT].status == "passed"
    assert run.outcomes[OPEN_LOOP].status == "passed"
    assert "test_correctness.py::test_known_answer[probe0]" not in {
        t for t, o in run.outcomes.items() if o.status == "skipped"
    }
    report = pytester.path / "report"
    page = (report / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 3  # the per-level plots at least
    assert "node1" in page  # the per-node facts
    levels = read_results(report / "results.json").levels
    assert all(s.goodput is not None for s in levels)
    vllm = {f"vllm-{level_slug(s)}.json" for s in levels}
    assert {p.name for p in report.glob("vllm-*.json")} == vllm
    sent = sum(s.completed + s.failed for s in levels)
    assert len((report / "requests.jsonl").read_text().splitlines()) == sent
    assert (report / "results.csv").read_text().count("\n") == len(levels) + 1
    for c in (1, 4, 16):  # the plan's levels, 16 requests each, said as they end
        assert f"c={c}: 16/16 done, " in run.output, run.output
    assert "4 req/s: 16/16 done, " in run.output
    assert "prompts: 66 from http://" in run.output  # 2 warm-up + 4 x 16, with the tokenizer
    assert [s.label for s in levels] == ["c=1", "c=4", "c=16", "4 req/s"]
    assert "engine /metrics: none recorded" not in run.output
    seen = check_page(report / "report.html", tmp_path / "report.png")
    assert seen.broken_images == []
    assert seen.empty_tables == []
    alts = " ".join(alt for alt, _ in seen.images)
    for picture in ("against concurrency", "one point per level", "Cumulative distribution of "
                    "TTFT", "ITL", "tokens/s per second", "The engine's /metrics"):  # fmt: skip
        assert picture in alts, alts
    running = lab.ssh("node1", ["docker", "inspect", "-f", "{{.State.Running}}", CONTAINER])
    assert running.stdout.strip() == "true", "--endpoint must never stop the server"


def test_prompts_have_their_planned_length_in_the_servers_own_tokens(server):
    """vLLM's /tokenize and /detokenize at the server root build the prompts: each is as
    long as planned in SmolLM2's tokens, and each begins with a token of its own."""
    prompts = build_prompts(server, SERVED, 12, 64, 8, 0.25, seed=3)
    counted = [post_json(server, "/tokenize", {"model": SERVED, "prompt": p.text,
                                               "add_special_tokens": False}, 30)
               for p in prompts]  # fmt: skip
    tokens = [reply["tokens"] for _, reply in counted]
    assert [len(t) for t in tokens] == [p.input_tokens for p in prompts]
    assert all(48 <= p.input_tokens <= 80 for p in prompts), [p.input_tokens for p in prompts]
    assert len({t[0] for t in tokens}) == len(prompts)


def test_plan_served_name_not_served_is_named(server, pytester, tmp_path):
    plan = tmp_path / "plan.yaml"
    text = (ROOT / "inventories" / "lab.yaml").read_text()
    plan.write_text(text.replace(f"served_name: {SERVED}", "served_name: smollm2-instruct"))
    run = smoke(pytester, server, "-k", "conformance", inventory=plan)
    assert MODELS in run.red(), run.output
    message = run.message(MODELS)
    assert "'smollm2-instruct'" in message
    assert SERVED in message


def test_streams_without_usage_are_red(server, pytester):
    with usage_stripped(server) as proxy:
        run = smoke(pytester, proxy)
    assert STREAMS | {USAGE} <= run.red(), run.output
    assert "usage" in run.message(sorted(STREAMS)[0])
    assert "without usage" in run.message(USAGE)


# The server is killed at a fixed point of the sweep, after its warm-up and first level
# (c = 1), never after a fixed time: a fast CPU finished the whole sweep in less than the
# 4 s a timer once gave it, and the run was green (CI, AVX-512).
KILLER = """
from infergate.fixtures import endpoint
from infergate.inference.client import post_json
from infergate.inference.workload import build_prompts
from infergate_lab import Lab

measure = endpoint.run_level
calls = []

def run_level(*args, **kwargs):
    if len(calls) == 1:  # the c = 1 level is done (the warm-up runs before any level)
        Lab().ssh("node1", ["docker", "kill", "outside-the-suite"])
    calls.append(args)
    return measure(*args, **kwargs)

endpoint.run_level = run_level
"""


def test_server_dying_mid_run_fails_the_requests(server, pytester, lab):
    pytester.makepyfile(killer=KILLER)
    run: SuiteRun = smoke(pytester, server, "-k", "performance", "-p", "killer")
    killed = {COMPLETES[4], COMPLETES[16]}  # the levels after the kill; c = 1 ran before it
    assert run.red() & set(COMPLETES.values()) == killed, run.output
    for test in killed:
        assert "requests failed" in run.message(test)
    assert (pytester.path / "report" / "report.html").exists()
