"""The figures as other tools read them, without a cluster: the new figures (input tokens,
std, p90/p95, goodput) against hand computations, the goodput gate, vLLM's --save-result
form, the CSV, requests.jsonl, results.json's schema and the tool's version and commit.

Records are hand-built as in test_inference_lib (a request started at 0 whose content
chunks came at the times given)."""

from __future__ import annotations

import csv
import io
import json
import math
import socket
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from infergate.deploy.stacks import HUNG, WAITS
from infergate.inference import client, metrics, plan
from infergate.inference.client import StreamRecord
from infergate.plan.apikey import HIDDEN
from infergate.plan.model import Slo
from infergate.reports import files, inference_csv, inference_html, inference_json
from infergate.reports.inference import Outcome
from infergate.reports.version import checkout_commit, tool_version
from infergate.reports.vllm_json import queue_times, vllm_result
from selftest.unit.test_inference_lib import TEN_CHUNKS, record, results


def used(rec: StreamRecord, prompt: int) -> StreamRecord:
    """REC with the usage a server sends: its prompt's tokens beside the completion's."""
    return replace(rec, usage={**(rec.usage or {}), "prompt_tokens": prompt})


# ttft 100 ms, TPOT 100 ms, E2E 1000 ms | ttft 200, one token (TPOT 0 for goodput), E2E 300
# | ttft 600, TPOT 100, E2E 700 | failed
LEVEL = [
    used(record(TEN_CHUNKS, tokens=10), 30),
    used(record([0.2], tokens=1, end=0.3), 20),
    used(record([0.6, 0.7], tokens=2), 10),
    used(record([], tokens=None, status=500), 40),
]
SLO = Slo(ttft_ms=500, tpot_ms=50, e2e_ms=800)


def test_distribution_against_hand_computed_figures() -> None:
    d = metrics.distribution([1.0, 2.0, 3.0, 4.0])
    assert (d.mean_ms, d.median_ms, d.count) == (2500, 2500, 4)
    assert d.std_ms == pytest.approx(math.sqrt((1500**2 + 500**2) * 2 / 4))  # population
    # linear interpolation at rank (n - 1) p: 2.7, 2.85, 2.97 between 3000 and 4000 ms
    assert (d.p90_ms, d.p95_ms, d.p99_ms) == pytest.approx((3700, 3850, 3970))


def test_input_tokens_and_total_token_throughput_count_completed_requests() -> None:
    s = metrics.summarize_records(LEVEL, duration_s=2.0, concurrency=4)
    assert (s.total_input_tokens, s.total_output_tokens) == (60, 13)  # the failed 40: not
    assert s.total_token_throughput == pytest.approx(73 / 2)
    assert s.goodput is None  # no objective planned
    assert s.label == "c=4"
    assert replace(s, request_rate=2.5).label == "2.5 req/s"


def test_goodput_counts_requests_within_every_objective() -> None:
    s = metrics.summarize_records(LEVEL, duration_s=2.0, concurrency=4, slo=SLO)
    assert s.goodput == metrics.Goodput(
        good=1, per_s=0.5, fraction=0.25, missed=(("ttft", 1), ("tpot", 2), ("e2el", 1))
    )
    at_the_limit = Slo(ttft_ms=100, tpot_ms=100, e2e_ms=1000)  # vLLM: good when slo >= figure
    first = metrics.summarize_records(LEVEL[:1], 1.0, 1, slo=at_the_limit)
    assert first.goodput is not None
    assert first.goodput.good == 1


def test_goodput_gate_names_the_level_and_the_objective_missed_most() -> None:
    s = metrics.summarize_records(LEVEL, duration_s=2.0, concurrency=4, slo=SLO)
    assert plan.check_goodput(s, replace(SLO, min_goodput_fraction=0.25)) == []
    assert plan.check_goodput(s, SLO) == []  # reported, not gated
    (red,) = plan.check_goodput(s, replace(SLO, min_goodput_fraction=0.5))
    assert red.found == "1 of 4 requests (25%) within the SLO at c=4 (goodput 0.50 req/s)"
    assert red.planned == (
        "at least 50% (inference.slo.min_goodput_fraction) within ttft_ms 500 ms, "
        "tpot_ms 50 ms, e2e_ms 800 ms"
    )
    assert red.remedy.startswith(
        "missed most: tpot_ms (2 of 3 completed requests over 50 ms; median 100.0"
    )
    assert "decode is slow" in red.remedy


def test_goodput_lost_to_failures_alone_says_so() -> None:
    s = metrics.summarize_records(LEVEL[1:], 1.0, 2, slo=Slo(ttft_ms=10_000))
    (red,) = plan.check_goodput(s, Slo(ttft_ms=10_000, min_goodput_fraction=1))
    assert red.remedy.startswith("the 2 completed request(s) all met the SLO; 1 failed: HTTP 500")


def test_a_level_whose_requests_hung_names_where_each_rank_waits() -> None:
    """A stream from a server that takes the connection and never answers: the level's red
    ends with where each rank waited, and its fix leads with the hang; without stacks, not."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        v1 = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        hung = client.stream_completion(v1, "/chat/completions", {"model": "m"}, 0.3)
    assert hung.timed_out
    s = metrics.summarize_records([LEVEL[0], hung], 1.0, 2)
    # rank_lines' form, as the lab's load gave it (selftest/data/py-spy/vllm-tp2-load-hang-*)
    stacks = (
        "node1 (10.251.0.11) pid 11895 VLLM::Worker_TP0: waiting in all_reduce (torch/"
        "distributed/distributed_c10d.py:3252); stacks: evidence/node1/stacks-load-c2.txt",
    )
    [red] = plan.check_failures(s, stacks)
    assert red.found.startswith("1 of 2 requests failed at c=2: ")
    assert red.found.endswith(f"{WAITS} {stacks[0]}"), red.found
    assert red.remedy.startswith(HUNG)
    [plain] = plan.check_failures(s)
    assert WAITS not in plain.found
    assert not plain.remedy.startswith(HUNG)


def test_summary_with_goodput_survives_a_json_round_trip() -> None:
    s = metrics.summarize_records(LEVEL, 2.0, 4, request_rate=1.5, slo=SLO)
    assert metrics.summary_from_dict(json.loads(json.dumps(metrics.summary_to_dict(s)))) == s


# vLLM 0.32.0, vllm/benchmarks/serve.py: main_async's result_json setup keys, then
# benchmark()'s `result` for a generation task, then process_one_metric's mean/median/std
# and one key a percentile for ttft, tpot, itl and e2el, as
# `--save-result --save-detailed --max-concurrency N --percentile-metrics ttft,tpot,itl,e2el
# --metric-percentiles 90,95,99` writes them (no --metadata, ramp-up, probes, speculative
# decoding or diffusion keys)
VLLM_032_KEYS = [
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
    *[
        f"{stat}_{name}_ms"
        for name in ("ttft", "tpot", "itl", "e2el")
        for stat in ("mean", "median", "std", "p90", "p95", "p99")
    ],
]


def test_vllm_result_has_vllm_0_32_keys_and_figures(tmp_path: Path) -> None:
    s = metrics.summarize_records(LEVEL, 2.0, 4, slo=SLO)
    writer = files.LevelWriter(tmp_path, "tiny", "20261201-100000")
    path = writer.write(s, LEVEL)
    assert path.name == "vllm-c4.json"
    saved = json.loads(path.read_text())
    assert list(saved) == VLLM_032_KEYS
    assert (saved["max_concurrency"], saved["request_rate"], saved["num_prompts"]) == (4, "inf", 4)
    assert saved["input_lens"] == [30, 20, 10, 40]
    assert saved["output_lens"] == [10, 1, 2, 0]
    assert saved["ttfts"] == pytest.approx([0.1, 0.2, 0.6, 0.0])
    assert saved["itls"][2] == pytest.approx([0.1])
    assert saved["errors"] == ["", "", "", "HTTP 500: boom"]
    assert saved["request_goodput"] == 0.5
    assert saved["median_ttft_ms"] == pytest.approx(200)
    assert saved["p95_e2el_ms"] == pytest.approx(s.e2el.p95_ms)
    assert saved["max_concurrent_requests"] == 3  # three completed requests all start at 0
    assert saved["max_output_tokens_per_s"] == 12  # 9 + 1 + 2 chunks before 1 s, 1 at 1.0 s


def test_open_loop_level_is_named_by_its_rate(tmp_path: Path) -> None:
    s = metrics.summarize_records(LEVEL, 2.0, 4, request_rate=2.5)
    saved = json.loads(files.LevelWriter(tmp_path, "tiny", "d").write(s, LEVEL).read_text())
    assert (saved["request_rate"], saved["max_concurrency"]) == (2.5, None)
    assert saved["request_goodput"] is None  # no --goodput


def test_queue_times_count_from_each_requests_arrival() -> None:
    """vLLM 0.32.0's client_queue_time: the send less the arrival; a closed loop's requests
    all arrive at the level's start, an open loop's at their planned times."""
    starts = [1.0, 1.0, 1.5, 2.25]
    closed = [replace(r, start_s=t) for r, t in zip(LEVEL, starts, strict=True)]
    assert queue_times(closed) == [0.0, 0.0, 0.5, 1.25]
    arrivals = [1.0, 0.75, 1.5, 2.0]
    opened = [replace(r, arrival_s=a) for r, a in zip(closed, arrivals, strict=True)]
    assert queue_times(opened) == [0.0, 0.25, 0.0, 0.25]
    s = metrics.summarize_records(opened, 2.0, 0, request_rate=2.5)
    assert vllm_result(s, opened, model="m", date="d")["queue_times"] == [0, 0.25, 0, 0.25]


def test_requests_jsonl_has_a_line_per_request_and_never_the_key(tmp_path: Path) -> None:
    key = 'sk-"abc123XYZ"'  # a quote: JSON writes it escaped
    leaked = replace(LEVEL[3], error=f"HTTP 500: Bearer {key} refused")
    writer = files.LevelWriter(tmp_path, "tiny", "d", secrets=[key])
    s = metrics.summarize_records([*LEVEL[:3], leaked], 2.0, 4)
    writer.write(s, [*LEVEL[:3], leaked])
    writer.write(metrics.summarize_records(LEVEL[:1], 1.0, 1), LEVEL[:1])
    raw = (tmp_path / "requests.jsonl").read_text()
    assert "abc123XYZ" not in raw
    assert "abc123XYZ" not in (tmp_path / "vllm-c4.json").read_text()
    assert f"Bearer {HIDDEN} refused" in raw
    lines = [json.loads(line) for line in raw.splitlines()]
    assert [line["level"] for line in lines] == ["c=4"] * 4 + ["c=1"]
    first = lines[0]
    assert (first["status"], first["input_tokens"], first["output_tokens"]) == (200, 30, 10)
    assert (first["ttft_ms"], first["tpot_ms"], first["e2e_ms"]) == pytest.approx((100, 100, 1000))
    assert first["itl_ms"] == pytest.approx([100] * 9)
    assert (first["finish_reason"], first["error"], first["start_offset_ms"]) == ("length", "", 0)
    assert lines[3]["ttft_ms"] is None
    assert "HTTP 500" in lines[3]["error"]
    files.LevelWriter(tmp_path, "tiny", "d")  # a new sweep starts requests.jsonl again
    assert (tmp_path / "requests.jsonl").read_text() == ""


def test_csv_has_a_row_per_level_that_parses_back() -> None:
    levels = [metrics.summarize_records(LEVEL[: c + 1], 1.0 + c, c, slo=SLO) for c in (1, 2)]
    rows = list(csv.DictReader(io.StringIO(inference_csv.levels_csv(levels))))
    assert [row["level"] for row in rows] == ["c=1", "c=2"]
    for row, s in zip(rows, levels, strict=True):
        assert float(row["output_throughput"]) == s.output_throughput
        assert float(row["p90_ttft_ms"]) == s.ttft.p90_ms
        assert int(row["total_input_tokens"]) == s.total_input_tokens
        assert s.goodput is not None
        assert float(row["goodput_fraction"]) == s.goodput.fraction
        assert row["request_rate"] == ""  # closed loop
    assert inference_csv.levels_csv([]) == ""


def test_results_json_carries_schema_and_tool_and_round_trips(tmp_path: Path) -> None:
    json_path, _ = files.write_report(tmp_path, results())
    data = json.loads(json_path.read_text())
    assert data["schema_version"] == inference_json.SCHEMA_VERSION
    assert data["tool"] == {
        "name": "infergate",
        "version": tool_version().version,
        "commit": tool_version().commit,
    }
    assert inference_json.read_results(json_path) == results()
    old = {k: v for k, v in data.items() if k not in ("schema_version", "tool")}
    json_path.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="schema_version 1; this infergate reads 3"):
        inference_json.read_results(json_path)


def test_tool_commit_is_this_checkout_head() -> None:
    root = Path(files.__file__).parents[2]
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert tool_version().commit == head


SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("files", "found"),
    [
        pytest.param({"HEAD": "ref: refs/heads/main\n", "refs/heads/main": SHA}, SHA, id="loose"),
        pytest.param(
            {"HEAD": "ref: refs/heads/main\n", "packed-refs": f"# pack\n{SHA} refs/heads/main\n"},
            SHA,
            id="packed",
        ),
        pytest.param({"HEAD": f"{SHA}\n"}, SHA, id="detached"),
        pytest.param({"HEAD": "ref: refs/heads/unborn\n"}, None, id="unborn-branch"),
        pytest.param({}, None, id="no-checkout"),
    ],
)
def test_checkout_commit_reads_git_without_git(
    tmp_path: Path, files: dict[str, str], found: str | None
) -> None:
    for name, text in files.items():
        (tmp_path / ".git" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / ".git" / name).write_text(text)
    assert checkout_commit(tmp_path) == found


def test_checkout_commit_of_a_worktree_reads_the_shared_refs(tmp_path: Path) -> None:
    main, tree = tmp_path / "main" / ".git", tmp_path / "tree"
    own = main / "worktrees" / "tree"
    own.mkdir(parents=True)
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {own}\n")
    (own / "HEAD").write_text("ref: refs/heads/feature\n")
    (own / "commondir").write_text("../..\n")
    (main / "packed-refs").write_text(f"{SHA} refs/heads/feature\n")
    assert checkout_commit(tree) == SHA


def test_a_failed_outcome_keeps_its_code_and_severity(tmp_path: Path) -> None:
    failed = Outcome("test_chat.py::test_endpoint_serves_one_request", "failed", "no answer")
    coded = replace(failed, code="IG-ENDPOINT-DEAD", severity="fail")
    json_path, _ = files.write_report(tmp_path, replace(results(), conformance=(coded,)))
    (said,) = json.loads(json_path.read_text())["conformance"]
    assert (said["code"], said["severity"]) == ("IG-ENDPOINT-DEAD", "fail")
    assert inference_json.read_results(json_path).conformance == (coded,)


def test_report_html_opens_with_the_verdict_and_says_which_gates_ran() -> None:
    failed = Outcome("test_chat.py::test_endpoint_serves_one_request", "failed", "no answer")
    failed = replace(failed, code="IG-ENDPOINT-DEAD", severity="fail")
    gate = Outcome("test_perf.py::test_every_request_completes", "skipped", "no sweep was run")
    page = inference_html.render_html(replace(results(), conformance=(failed, gate)))
    body = page.split("<body>")[1]
    assert "<p class='fail'>NOT READY" in body.split("<h2>")[0]  # before the first section
    assert "<b>IG-ENDPOINT-DEAD</b>" in body
    gates = body.split("<h2>Performance gates</h2>")[1].split("</table>")[0]
    assert "test_every_request_completes" in gates
    assert "no sweep was run" in gates
