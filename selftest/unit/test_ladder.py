"""The long-context ladder's library: the rungs of a plan's context (the seed's two Sparks
too) and their deadlines, the context the plan's flags and the server give, the judge of a
rung on answers recorded from the lab's vLLM 0.32.0 (replayed by a real HTTP server), what
the kernel said while a rung ran, and the rungs in the report (selftest/data/ladder/)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import replace
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from infergate.deploy.kernel_since import kernel_news, parse_kernel_since
from infergate.deploy.stacks import WAITS
from infergate.inference.client import StreamRecord, stream_completion
from infergate.inference.ladder import (
    TEXT_PATH,
    Context,
    Rung,
    RungRun,
    budget_s,
    check_context_served,
    check_rung,
    context_planned,
    deadline_s,
    figures_of,
    parse_served_context,
    rungs_of,
    served_source,
    slack,
    text_body,
)
from infergate.plan.loader import load_plan
from infergate.plan.model import Inventory, Ladder
from infergate.reports.inference import ReportMeta, Results
from infergate.reports.inference_html import render_html
from infergate.reports.inference_json import read_results, render_json
from selftest.local_http import JsonHandler, serving

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "selftest" / "data"
LADDER = DATA / "ladder"
SEED_CONTEXT = 131_072  # dgx-spark-playbooks#97: the 131K prefill that reset a Spark head


def plan(name: str, *flags: str) -> Inventory:
    found = load_plan(ROOT / "inventories" / name)
    return replace(found, engine=replace(found.engine, flags=(*found.engine.flags, *flags)))


def test_rungs_scale_to_the_seeds_two_sparks() -> None:
    seed = plan("two-sparks-vllm.yaml")
    assert context_planned(seed) is None  # its flags set no --max-model-len: the served one
    ladder = seed.inference.ladder
    rungs = rungs_of(served_source(SEED_CONTEXT).tokens, ladder)
    assert [(r.label, r.input_tokens, r.output_tokens) for r in rungs] == [
        ("25%", 32768, 16),
        ("50%", 65536, 16),
        ("75%", 98304, 16),
        ("95%", 124518, 16),
        ("95% x2", 124518, 16),
    ]
    # at the 200 tokens/s floor the top rung may take 12.4 min, two at once 22.8 min
    assert deadline_s(rungs[3], ladder, 120) == pytest.approx(120 + 124518 / 200)
    assert deadline_s(rungs[4], ladder, 120) == pytest.approx(120 + 2 * 124518 / 200)
    built = sum(r.requests * 30 for r in rungs)
    assert budget_s(seed) == pytest.approx(built + sum(deadline_s(r, ladder, 120) for r in rungs))


def test_each_engine_adapter_reads_its_own_context_flag() -> None:
    assert context_planned(plan("lab.yaml")) == Context(1024, "--max-model-len 1024 (engine.flags)")
    sglang = plan("two-sparks-sglang.yaml", "--context-length", "131072")
    assert context_planned(sglang) == Context(131072, "--context-length 131072 (engine.flags)")
    assert context_planned(plan("two-sparks-sglang.yaml", "--max-model-len", "4096")) is None
    vllm = "two-sparks-vllm.yaml"
    assert context_planned(plan(vllm, "--max-model-len=32k")) == Context(
        32000, "--max-model-len 32k (engine.flags)"
    )
    assert context_planned(plan(vllm, "--max-model-len", "-1")) is None  # the engine fits it
    assert context_planned(None) is None


@pytest.mark.parametrize("context", [100, 1024, 4096, SEED_CONTEXT])
def test_top_rung_leaves_room_for_the_answer(context: int) -> None:
    top = rungs_of(context, Ladder())[-1]
    assert top.input_tokens + top.output_tokens + slack(context) <= context
    assert top.requests == 2


def test_no_overlapping_rung_where_the_plan_sends_one() -> None:
    rungs = rungs_of(1024, Ladder(rungs=(0.5, 0.9), overlapping=0))
    assert [r.label for r in rungs] == ["50%", "90%"]


def test_served_context_is_read_from_recorded_models_answers() -> None:
    smollm2 = json.loads((LADDER / "vllm-models-smollm2.json").read_text())
    assert parse_served_context(smollm2, "smollm2-135m") == 1024
    moe = json.loads((DATA / "inference" / "vllm-models.json").read_text())
    assert parse_served_context(moe, "tiny-qwen3-moe") == 1024
    assert parse_served_context(moe, "smollm2-135m") is None
    assert parse_served_context({"data": [{"id": "m"}]}, "m") is None  # no max_model_len
    assert parse_served_context("Not Found", "m") is None


def test_plan_beyond_the_served_context_names_both_figures() -> None:
    planned = Context(2048, "--max-model-len 2048 (engine.flags)")
    [problem] = check_context_served(planned, 1024)
    assert "serves a context of 1024 tokens" in problem.found
    assert problem.planned == "2048 tokens, --max-model-len 2048 (engine.flags)"
    assert "1024" in problem.remedy
    assert check_context_served(planned, 2048) == []
    assert check_context_served(planned, None) == []  # the server does not say


class Replay(JsonHandler):
    """The recorded answers: /ok/v1 streams the 256-token rung, /over/v1 the refusal."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.startswith("/over/"):
            body, status = (LADDER / "vllm-over-length.txt").read_text().splitlines()
            return self.reply(int(status), json.loads(body))
        data = (LADDER / "vllm-text-stream-256.sse").read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def replay() -> Iterator[str]:
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Replay)) as httpd:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"


def answer(base: str, way: str) -> StreamRecord:
    return stream_completion(f"{base}/{way}/v1", TEXT_PATH, text_body("m", "x", 16), 10)


def test_rung_answered_as_planned_passes(replay: str) -> None:
    run = RungRun(Rung(0.25, 256, 16), (answer(replay, "ok"),), 2.0)
    assert check_rung(run) == []
    figures = figures_of(run)
    assert (figures.prompt_tokens, figures.completion_tokens, figures.verdict) == (
        256,
        16,
        "passed",
    )
    assert figures.tokens_per_s == pytest.approx(272 / 2.0)


def test_rung_whose_counts_differ_names_them(replay: str) -> None:
    run = RungRun(Rung(0.5, 512, 8), (answer(replay, "ok"),), 2.0)
    [problem] = check_rung(run)
    assert "usage.prompt_tokens 256, not 512" in problem.found
    assert "usage.completion_tokens 16, not 8" in problem.found


def test_rung_refused_names_the_rung_the_engines_words_and_the_logs(replay: str) -> None:
    over = answer(replay, "over")
    kernel = ("node1 (10.0.0.1): nothing", "node2 (10.0.0.2): rebooted meanwhile")
    run = RungRun(Rung(0.75, 1536, 16, 2), (over, over), 0.1, "", "ERROR oops", kernel)
    [problem] = check_rung(run)
    assert problem.found.startswith("rung 75% x2 (1536 tokens in, 16 out): request 1 of 2 ")
    assert "failed: HTTP 400: " in problem.found
    assert "maximum context length is 1024 tokens" in problem.found
    assert "the head's engine log meanwhile: ERROR oops" in problem.found
    assert "node2 (10.0.0.2): rebooted meanwhile" in problem.found
    assert figures_of(run).verdict == "failed"


def test_hung_rung_names_where_each_rank_waits_and_leads_its_fix_with_the_hang() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:
        v1 = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        hung = stream_completion(v1, TEXT_PATH, text_body("m", "x", 16), 0.3)
    assert hung.timed_out
    # rank_lines' form, as the lab's SGLang hang gave it (docs/forensics.md)
    stacks = (
        "node2 (10.0.0.2) pid 5978 sglang::scheduler_TP1: waiting in _new_process_group_helper "
        "(torch/distributed/distributed_c10d.py:2169); stacks: evidence/node2/"
        "stacks-ladder-95pct-x2.txt",
    )
    rung = Rung(0.95, 972, 16, 2)
    [problem] = check_rung(RungRun(rung, (hung, hung), 0.3, "", "", (), stacks))
    assert "(timeout 0.3 s)" in problem.found
    assert problem.found.endswith(f"{WAITS} {stacks[0]}"), problem.found
    assert problem.remedy.startswith("a request hung past its deadline: the stacks name")
    assert rung.file_label == "ladder-95pct-x2"


def test_rung_whose_prompts_were_not_built_says_why() -> None:
    run = RungRun(Rung(0.95, 972, 16), (), 0.5, unbuilt="http://h/tokenize answered 400")
    [problem] = check_rung(run)
    assert "its prompts were not built: http://h/tokenize answered 400" in problem.found


def test_kernel_said_nothing_or_cannot_be_read_as_captured() -> None:
    root = parse_kernel_since((LADDER / "kernel-since-debian-root.txt").read_text())
    assert root.uptime_s == pytest.approx(9189.81)
    assert kernel_news(root, 30.0) == "nothing"
    nobody = parse_kernel_since((LADDER / "kernel-since-debian-nobody.txt").read_text())
    said = kernel_news(nobody, 30.0)
    assert said.startswith("unreadable: ")
    assert "sudo usermod -aG adm nobody" in said


def test_kernel_lines_since_the_rung_began_and_a_reboot() -> None:
    found = parse_kernel_since((LADDER / "kernel-since-xid-oom.txt").read_text())
    said = kernel_news(found, 60.0)  # since 13639.5: the second Xid and the OOM kill
    assert said.startswith("2 line(s), the last: [13695.002113] NVRM: Xid (PCI:0000:44:00): 79")
    assert kernel_news(found, 600.0).startswith("3 line(s)")
    assert kernel_news(found, 20000.0) == ("rebooted meanwhile: up 13700 s, the rung ran 20000 s")


def test_rungs_go_into_results_json_and_report_html(replay: str, tmp_path: Path) -> None:
    ok = RungRun(Rung(0.25, 256, 16), (answer(replay, "ok"),), 2.0)
    over = RungRun(Rung(0.5, 1024, 16), (answer(replay, "over"),), 0.1)
    context = Context(1024, "--max-model-len 1024 (engine.flags)")
    rungs = (figures_of(ok, context), figures_of(over, context))
    results = Results(ReportMeta("lab", "http://h/v1", "m", "now"), (), ladder=rungs)
    path = tmp_path / "results.json"
    path.write_text(render_json(results))
    assert read_results(path).ladder == rungs
    page = render_html(results)
    assert "<h2>Long-context ladder</h2>" in page
    assert "maximum context length is 1024 tokens" in page
    assert "Context climbed: 1024 tokens, --max-model-len 1024 (engine.flags)" in page
