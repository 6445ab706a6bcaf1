"""tests_inference against a real vLLM started outside the suite (`--endpoint`): green when
the server is right, its /metrics scraped level by level, and red for the right reason with
each defect we can really produce: the plan's served name not served, streams without usage,
the server dying mid-run. On the same server, the prefix-cache effect, which is why the load
sends distinct prompts: a prompt the engine has seen is answered sooner than a new one of the
same length, and the engine's own counters say it served the repeat from its cache.

One server for the module; the test that kills it runs last."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from infergate.inference.client import StreamRecord, call, get_json, post_json, stream_completion
from infergate.inference.engine_metrics import parse_prometheus_text
from infergate.inference.ladder import TEXT_PATH, parse_served_context, text_body
from infergate.inference.plan import CHAT_PATH
from infergate.inference.workload import build_prompts, chat_bodies
from infergate.plan.loader import load_plan
from infergate.reports.files import level_slug
from infergate.reports.inference_json import read_results
from infergate_lab import Lab
from infergate_lab.engine import serving_alone
from infergate_lab.usage_proxy import usage_stripped
from selftest.browser import check_page
from selftest.lab.test_deploy_lab import SHORT, plan_file, short_sweep
from selftest.suite import LAB_PLAN, SuiteRun, run_folder_in, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

SERVED = "smollm2-135m"  # inventories/lab.yaml's model.served_name
PORT = 18433
CONTAINER = "outside-the-suite"
MODELS = "test_conformance.py::test_models_lists_the_planned_served_name"
LADDER = {
    t: f"test_long_context.py::test_{t}"
    for t in (
        "planned_context_is_served",
        "each_context_rung_completes",
        "overlapping_requests_at_the_top_complete",
    )
}
RUNGS = ["25%", "50%", "75%", "95%", "95% x2"]
STREAMS = {
    f"test_conformance.py::test_stream_is_framed_and_ends_with_usage[{p}]" for p in ("chat", "text")
}
USAGE = "test_performance.py::test_usage_counts_the_streamed_tokens"
USAGE_TESTS = "stream_is_framed or usage_counts"  # the tests that read a stream's usage
DYING_LEVELS = [1, 2, 4]  # the dying server's short plan: two levels after the one it dies in
COMPLETES = {c: f"test_performance.py::test_every_request_completes[c={c}]" for c in DYING_LEVELS}


@pytest.fixture(scope="module")
def server(engine: object, lab: Lab) -> Iterator[str]:
    """SmolLM2 served alone on node1 by `docker run`, outside any suite run; eager (no
    torch.compile): these tests judge what it serves, and it starts minutes sooner on AVX2."""
    with serving_alone(lab, "node1", SERVED, PORT, CONTAINER, serve=["--enforce-eager"]) as base:
        yield base


# The suite's own Scraper, reading /metrics every 0.25 s (a short level still gets several
# reads), its samples and last problem written to scrapes.json when the sweep ends
SCRAPES = """
import json
from infergate.fixtures import endpoint

class Recorded(endpoint.Scraper):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs, interval_s=0.25)

    def __exit__(self, *exc):
        super().__exit__(*exc)
        samples = [{"t_s": s.t_s, "level": s.level, "values": dict(s.values)}
                   for s in self.samples]
        with open("scrapes.json", "w") as f:
            json.dump({"problem": self.problem, "samples": samples}, f)

endpoint.Scraper = Recorded
"""


def smoke(pytester: pytest.Pytester, url: str, *args: str, inventory: Path | None = None):
    report = pytester.path / "report"
    return run_suite(
        pytester,
        "-m",
        "inference",
        "--endpoint",
        f"{url}/v1",
        "--report-dir",
        str(report),
        *args,
        inventory=inventory,
    )


def short_plan(tmp_path: Path, concurrency: list[int]) -> Path:
    return plan_file(tmp_path, lambda plan: short_sweep(plan, concurrency), base=LAB_PLAN)


LABELS = ["c=1", f"c={SHORT}", "4 req/s"]  # c = 4 sends its level at once: several run
GOODPUT = "test_performance.py::test_goodput_meets_the_slo[c=1]"
OPEN_LOOP = "test_performance.py::test_every_request_completes[4 req/s]"
PICTURES = (  # words of the report's pictures' alt texts
    "against concurrency",
    "one point per level",
    "Cumulative distribution of TTFT",
    "ITL",
    "tokens/s per second",
    "The engine's /metrics over the load",
)


def test_external_endpoint_green_with_a_report(server, pytester, lab, tmp_path):
    def change(plan: dict) -> None:  # an SLO any server that answers meets: the gate runs green
        short_sweep(plan)
        # the ladder of a planned 256 tokens: ~20 prompt tokens/s here under load, the served
        # 1024 would take 220 s (docs/context-ladder.md#in-the-lab)
        plan["engine"]["flags"][1] = "256"  # --max-model-len's value
        plan["inference"]["ladder"] = {"enabled": True, "min_prefill_tokens_per_s": 5}
        slo = {"e2e_ms": 600000, "min_goodput_fraction": 1}
        plan["inference"].update(slo=slo, request_rates=[4])

    plan = plan_file(tmp_path, change, base=LAB_PLAN)
    pytester.makepyfile(scrapes=SCRAPES)
    run = smoke(pytester, server, "-p", "scrapes", inventory=plan)
    assert run.red() == set(), run.output
    assert run.outcomes[GOODPUT].status == "passed"
    assert run.outcomes[OPEN_LOOP].status == "passed"
    assert "test_correctness.py::test_known_answer[probe0]" not in {
        t for t, o in run.outcomes.items() if o.status == "skipped"
    }
    report = run_folder_in(pytester.path / "report")
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
    for level in LABELS:  # said as they end
        assert f"{level}: {SHORT}/{SHORT} done, " in run.output, run.output
    assert f"prompts: {2 + 3 * SHORT} from http://" in run.output  # warm-up 2, tokenized
    assert [s.label for s in levels] == LABELS
    assert "engine /metrics: none recorded" not in run.output
    scrapes_follow_the_levels(pytester.path / "scrapes.json")
    seen = check_page(report / "report.html", tmp_path / "report.png")
    assert seen.broken_images == []
    assert seen.empty_tables == []
    alts = " ".join(alt for alt, _ in seen.images)
    for picture in PICTURES:
        assert picture in alts, alts
    ladder_climbed(run, read_results(report / "results.json").ladder, page)
    running = lab.ssh("node1", ["docker", "inspect", "-f", "{{.State.Running}}", CONTAINER])
    assert running.stdout.strip() == "true", "--endpoint must never stop the server"


def ladder_climbed(run: SuiteRun, rungs: tuple, page: str) -> None:
    """The context ladder of the plan's 256 tokens: every rung passed, its prompt counted
    as planned by the server, and shown in the report."""
    assert {run.outcomes[t].status for t in LADDER.values()} == {"passed"}, run.output
    assert [r.rung for r in rungs] == RUNGS
    assert [r.planned_input_tokens for r in rungs] == [64, 128, 192, 232, 232]
    assert rungs[0].context == "256 tokens, --max-model-len 256 (engine.flags)"
    for r in rungs:
        assert r.verdict == "passed", r
        assert abs(r.prompt_tokens - r.planned_input_tokens * r.requests) <= r.requests, r
        assert r.completion_tokens == 16 * r.requests, r
    assert "Long-context ladder" in page


def scrapes_follow_the_levels(path: Path) -> None:
    """The sweep's /metrics scrapes say, level by level, that requests ran (several at once
    at the highest level) and the KV cache filled."""
    scraped = json.loads(path.read_text())
    samples = scraped["samples"]
    assert scraped["problem"] == "", scraped["problem"]
    assert {s["level"] for s in samples} == set(LABELS), samples
    assert max(s["values"]["running"] for s in samples if s["level"] == LABELS[1]) >= 2, samples
    assert max(s["values"]["kv_cache_usage"] for s in samples) > 0, samples
    assert {"waiting", "preemptions"} <= set(samples[0]["values"])
    assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)


def test_prompts_have_their_planned_length_in_the_servers_own_tokens(server):
    """vLLM's /tokenize and /detokenize at the server root build the prompts: each is as
    long as planned in SmolLM2's tokens, and each begins with a token of its own."""
    prompts = build_prompts(server, SERVED, 12, 64, 8, 0.25, seed=3)
    counted = [
        post_json(
            server,
            "/tokenize",
            {"model": SERVED, "prompt": p.text, "add_special_tokens": False},
            30,
        )
        for p in prompts
    ]
    tokens = [reply["tokens"] for _, reply in counted]
    assert [len(t) for t in tokens] == [p.input_tokens for p in prompts]
    assert all(48 <= p.input_tokens <= 80 for p in prompts), [p.input_tokens for p in prompts]
    assert len({t[0] for t in tokens}) == len(prompts)


def test_plan_served_name_not_served_is_named(server, pytester, tmp_path):
    plan = tmp_path / "plan.yaml"
    text = LAB_PLAN.read_text()
    plan.write_text(text.replace(f"served_name: {SERVED}", "served_name: smollm2-instruct"))
    run = smoke(pytester, server, "-k", "conformance", inventory=plan)
    root = "test_conformance.py::test_endpoint_serves_one_request"  # the endpoint gate's red
    assert run.red() == {root}, run.output
    message = run.message(root)
    assert "IG-ENDPOINT-UNKNOWN-MODEL" in message
    assert "'smollm2-instruct'" in message
    assert SERVED in message
    assert "(test_endpoint_serves_one_request)" in run.message(MODELS)


def test_endpoint_down_is_one_red_and_every_other_test_skips_naming_it(pytester, lab):
    down = "10.251.0.11:18439"  # node1 answers; nothing listens on this port
    run = smoke(pytester, f"http://{down}", "--endpoint-wait", "0", inventory=LAB_PLAN)
    root = "test_conformance.py::test_endpoint_serves_one_request"
    assert run.red() == {root}, run.output
    assert run.outcomes[root].status == "failed", run.output  # a finding, not an error
    message = run.message(root)
    assert "IG-ENDPOINT-REFUSED" in message
    assert f"nothing listens at {down}" in message
    # The lab plan names no parity reference: that test keeps its own cause, not the endpoint's.
    unplanned = {t for t in run.outcomes if t.startswith("test_reference_parity.py::")}
    assert {run.message(t).split(":")[0] for t in unplanned} == {"no reference"}, run.output
    others = set(run.outcomes) - {root} - unplanned
    assert len(others) > 20, run.output
    for test in others:
        assert run.outcomes[test].status == "skipped", test
        assert "(test_endpoint_serves_one_request)" in run.message(test), test
    assert "NOT READY" in run.output, run.output


def test_streams_without_usage_are_red(server, pytester, tmp_path):
    with usage_stripped(server) as proxy:
        run = smoke(pytester, proxy, "-k", USAGE_TESTS, inventory=short_plan(tmp_path, [1]))
    assert STREAMS | {USAGE} <= run.red(), run.output
    assert "usage" in run.message(sorted(STREAMS)[0])
    assert "without usage" in run.message(USAGE)


# vLLM V1 caches prefixes by default (vllm/engine/arg_utils.py: enable_prefix_caching falls to
# the model's default, on for generative models; only RISC-V CPUs turn it off), in full KV
# blocks; the CPU backend's block is 128 tokens unless set (vllm/platforms/cpu.py). A prompt
# shorter than a block can never hit, so these prompts are three blocks long. Counters:
# `vllm:prefix_cache_queries` and `vllm:prefix_cache_hits`, in tokens (vllm/v1/metrics/
# loggers.py), exposed with prometheus_client's `_total` suffix. The suite's runs on this
# server before share no block with these prompts: theirs are other random words (seed 0).
BLOCK = 128  # tokens per KV block on vLLM's CPU backend
INPUT_TOKENS = 3 * BLOCK  # with the chat template, three full blocks to hit
PAIRS = 5  # one new and one repeated request each, alternating: drift hits both alike
# The repeat skips the prefill of 384 of its ~416 tokens, most of a new prompt's TTFT on this
# CPU engine (six blocks with AVX-512 kernels, medians of 15: new 559 ms, repeated 46 ms, 0.08x).
# A repeat slower than half a new prompt means the cache did not serve it.
MARGIN = 0.5
QUERIES, HITS = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"


def cache_counters(base: str) -> tuple[float, float]:
    """(queried, hit) prompt tokens so far, summed over the engine's label sets."""
    status, text = get_json(base, "/metrics", 10)
    assert status == 200, f"{base}/metrics answered {status}: {text}"
    sums = {QUERIES: 0.0, HITS: 0.0}
    for sample in parse_prometheus_text(str(text)):  # not JSON: get_json hands the text
        if sample.name in sums:
            sums[sample.name] += sample.value
    return sums[QUERIES], sums[HITS]


def timed(base: str, body: dict[str, object]) -> tuple[StreamRecord, float, float]:
    """The request, and the prefix-cache tokens it queried and hit."""
    queried, hit = cache_counters(base)
    record = stream_completion(f"{base}/v1", CHAT_PATH, body, 120)
    assert record.ok, record.error
    queried_after, hit_after = cache_counters(base)
    return record, queried_after - queried, hit_after - hit


def test_lab_plan_keeps_prefix_caching_on():
    flags = load_plan(LAB_PLAN).engine.flags
    assert "--no-enable-prefix-caching" not in flags


def test_repeated_prompt_is_served_from_the_prefix_cache_sooner(server: str):
    prompts = build_prompts(server, SERVED, PAIRS + 1, INPUT_TOKENS, 2, 0.0, seed=14)
    repeated, *new = chat_bodies(prompts, SERVED)
    _, queried, _ = timed(server, repeated)  # fills the cache
    assert queried >= INPUT_TOKENS, f"the engine counted {queried} prefix-cache query tokens"
    fresh_ttft, again_ttft, fresh_hits, again_hits = [], [], [], []
    for body in new:
        record, _, hit = timed(server, body)
        fresh_ttft.append(record.ttft_s or 0.0)
        fresh_hits.append(hit)
        record, _, hit = timed(server, repeated)
        again_ttft.append(record.ttft_s or 0.0)
        again_hits.append(hit)
    fresh, again = statistics.median(fresh_ttft), statistics.median(again_ttft)
    seen = (
        f"median TTFT new {fresh * 1000:.1f} ms, repeated {again * 1000:.1f} ms; "
        f"hit tokens new {fresh_hits}, repeated {again_hits}"
    )
    print(seen)
    assert fresh_hits == [0.0] * PAIRS, seen  # the template's shared prefix is under a block
    assert min(again_hits) >= INPUT_TOKENS, seen  # all three blocks, every time
    assert again < MARGIN * fresh, seen


def test_context_planned_beyond_the_served_fails_the_late_rungs(server, pytester, tmp_path):
    """A plan whose --max-model-len (2048) is more than the server serves (1024): red naming
    both figures, and the rungs past 1024 tokens fail in the engine's own words."""

    def change(plan: dict) -> None:
        plan["engine"]["flags"][1] = "2048"  # --max-model-len's value
        plan["inference"]["ladder"] = {"rungs": [0.1, 0.5, 0.75, 0.95]}  # 10 %: one that fits

    plan = plan_file(tmp_path, change, base=LAB_PLAN)
    run = smoke(pytester, server, "-k", "long_context", inventory=plan)
    assert run.red() == set(LADDER.values()), run.output
    served = run.message(LADDER["planned_context_is_served"])
    assert "serves a context of 1024 tokens" in served, served
    assert "2048 tokens, --max-model-len 2048" in served, served
    rungs = run.message(LADDER["each_context_rung_completes"])
    assert "rung 10%" not in rungs, rungs
    for late in ("rung 50% (1024 tokens in", "rung 75% (1536 tokens in", "rung 95% (1945"):
        assert late in rungs, rungs
    assert OVER_LENGTH in rungs, rungs
    assert "engine log meanwhile: none kept (--endpoint" in rungs, rungs
    assert "node1 (10.251.0.11): nothing" in rungs, rungs


# The ladder's unit tests read these answers of the lab's vLLM (selftest/data/ladder/);
# INFERGATE_RECORD_LADDER=1 writes them afresh from the lab
LADDER_DATA = Path(__file__).parents[1] / "data" / "ladder"
OVER_LENGTH = "maximum context length is 1024 tokens"


def test_ladder_answers_are_as_recorded(server):
    """vLLM 0.32 counts a text prompt as its own /tokenize does, answers with the usage the
    ladder reads, lists max_model_len, and refuses a prompt past it in words the unit tests
    have recorded."""
    prompt = build_prompts(server, SERVED, 1, 256, 16, 0.0, seed=5)[0]
    body = text_body(SERVED, prompt.text, 16)
    streamed = stream_completion(f"{server}/v1", TEXT_PATH, body, 120)
    over = call(
        "POST", f"{server}/v1", TEXT_PATH, json.dumps({**body, "prompt": prompt.text * 5}), 60
    )
    models = call("GET", f"{server}/v1", "/models", None, 30)
    answers = {
        "vllm-text-stream-256.sse": streamed.raw,
        "vllm-over-length.txt": f"{json.dumps(over.body)}\n{over.status}\n",
        "vllm-models-smollm2.json": json.dumps(models.body) + "\n",
    }
    if os.environ.get("INFERGATE_RECORD_LADDER"):
        for name, text in answers.items():
            (LADDER_DATA / name).write_text(text)
    assert streamed.ok, streamed.error
    assert streamed.usage, streamed.raw
    assert streamed.usage["prompt_tokens"] == prompt.input_tokens == 256
    assert streamed.usage["completion_tokens"] == 16
    assert over.status == 400, over
    assert OVER_LENGTH in json.dumps(over.body), over
    assert parse_served_context(models.body, SERVED) == 1024
    for name in answers:  # the recorded ones say the same
        assert (LADDER_DATA / name).is_file(), name
    recorded = (LADDER_DATA / "vllm-over-length.txt").read_text()
    assert OVER_LENGTH in recorded


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


def test_server_dying_mid_run_is_one_red_and_the_later_checks_skip_naming_it(
    server, pytester, lab, tmp_path
):
    """Killed after the c = 1 level: c = 2, the first check to meet the dead server, is the
    one red; every check after it is skipped naming it, and what the endpoint answers now."""
    pytester.makepyfile(killer=KILLER)
    plan = short_plan(tmp_path, DYING_LEVELS)
    run: SuiteRun = smoke(pytester, server, "-k", "performance", "-p", "killer", inventory=plan)
    assert run.red() == {COMPLETES[2]}, run.output
    assert run.outcomes[COMPLETES[1]].status == "passed", run.output
    assert "requests failed" in run.message(COMPLETES[2])
    tests = list(run.outcomes)
    later = tests[tests.index(COMPLETES[2]) + 1 :]
    assert COMPLETES[4] in later, tests
    named = "node1 (10.251.0.11) stopped serving during the run: refused the connection"
    first = f"{named} (test_every_request_completes[c=2])"
    assert all(run.message(t).startswith(f"not checked: {first}") for t in later), run.output
    assert (run_folder_in(pytester.path / "report") / "report.html").exists()
