"""The load's workload without a cluster: prompts built through a real /tokenize and
/detokenize server on 127.0.0.1 (a toy tokenizer of this test's own), dataset files, the
levels, Poisson arrivals, and the duration and open-loop run modes against the SSE server
of test_inference_lib.

The toy tokenizer makes one token of each space-separated word of up to six characters, and
two of a longer one (its first six characters, then `#` and the rest, as WordPiece marks a
continuation); decoding glues a `#` token to the word before it. So decoding random ids and
encoding the text again can give fewer tokens than were drawn, as it can with a real BPE
tokenizer, and the builder has to adjust.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from infergate.inference import client, load, workload
from infergate.inference.progress import Progress
from infergate.inference.workload import Level, Prompt, WorkloadError
from infergate.plan.model import Inference
from infergate.reports import vllm_json
from selftest.local_http import JsonHandler, serving
from selftest.suite import PHASE_DIRS, PROJECT_CONFIG, ROOT
from selftest.unit.test_inference_lib import BODY, Handler, SseServer, base
from selftest.unit.test_inference_lib import server as server  # the SSE server fixture

# --- a tokenizer server -------------------------------------------------------------------


class TokenizerServer(ThreadingHTTPServer):
    daemon_threads = True
    detokenize_key = "prompt"  # vLLM's; SGLang answers "text"
    paths: list[str]

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), TokenizerHandler)
        self.vocab: list[str] = []
        self.ids: dict[str, int] = {}
        self.lock = threading.Lock()
        self.paths = []

    def encode(self, text: str) -> list[int]:
        pieces = [p for w in text.split() for p in ([w] if len(w) <= 6 else [w[:6], "#" + w[6:]])]
        with self.lock:
            for piece in pieces:
                if piece not in self.ids:
                    self.ids[piece] = len(self.vocab)
                    self.vocab.append(piece)
            return [self.ids[p] for p in pieces]

    def decode(self, tokens: list[int]) -> str:
        text = ""
        for piece in (self.vocab[t] for t in tokens):
            text += piece[1:] if piece.startswith("#") else f" {piece}"
        return text.strip()


class TokenizerHandler(JsonHandler):
    server: TokenizerServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.paths.append(self.path)
        if self.path == "/tokenize":
            assert body["add_special_tokens"] is False
            assert body["model"] == "tiny"
            tokens = self.server.encode(body["prompt"])
            return self.reply(200, {"count": len(tokens), "max_model_len": 2048, "tokens": tokens})
        if self.path == "/detokenize":
            text = self.server.decode(body["tokens"])
            return self.reply(200, {self.server.detokenize_key: text})
        return self.reply(404, {"detail": "Not Found"})


@pytest.fixture
def tokenizer() -> Iterator[TokenizerServer]:
    with serving(TokenizerServer()) as httpd:
        yield httpd


def root(httpd: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def build(httpd: TokenizerServer, count: int, length: int, spread: float = 0.0, seed: int = 1):
    return workload.build_prompts(root(httpd), "tiny", count, length, 8, spread, seed)


# --- prompts from the server's tokenizer --------------------------------------------------


def test_prompts_have_exactly_the_planned_length_as_the_server_counts(tokenizer):
    prompts = build(tokenizer, 40, 12)
    assert [p.input_tokens for p in prompts] == [12] * 40
    assert [len(tokenizer.encode(p.text)) for p in prompts] == [12] * 40
    assert {p.output_tokens for p in prompts} == {8}
    assert "/v1/tokenize" not in tokenizer.paths  # the server root, as vLLM serves it
    assert {"/tokenize", "/detokenize"} <= set(tokenizer.paths)


def test_adjusting_is_needed_with_this_tokenizer(tokenizer):
    """The toy merges a continuation into the word before it: a random draw re-encodes
    shorter, so the exact lengths above are the builder's doing, not the toy's."""
    pool = workload.token_pool(workload.ServerTokenizer(root(tokenizer), "tiny"), random.Random(1))
    rng = random.Random(2)
    drawn = [rng.choices(pool, k=12) for _ in range(20)]
    assert any(len(tokenizer.encode(tokenizer.decode(ids))) != 12 for ids in drawn)


def test_every_prompt_begins_with_a_token_of_its_own(tokenizer):
    prompts = build(tokenizer, 60, 10)
    firsts = [tokenizer.encode(p.text)[0] for p in prompts]
    assert len(set(firsts)) == 60
    assert len({p.text for p in prompts}) == 60


def test_spread_keeps_lengths_within_bounds_and_varies_them(tokenizer):
    prompts = build(tokenizer, 50, 20, spread=0.5)
    inputs = [len(tokenizer.encode(p.text)) for p in prompts]
    assert inputs == [p.input_tokens for p in prompts]
    assert all(10 <= n <= 30 for n in inputs)
    assert len(set(inputs)) > 5
    assert all(4 <= p.output_tokens <= 12 for p in prompts)  # 8 +- 50 %


def test_planned_lengths_follow_random_range_ratio():
    rng = random.Random(0)
    assert set(workload.planned_lengths(200, 100, 0.1, rng)) <= set(range(90, 111))
    assert set(workload.planned_lengths(100, 1, 0.9, rng)) == {1, 2}  # never below 1
    assert workload.planned_lengths(5, 7, 0.0, rng) == [7] * 5


def test_the_same_seed_gives_the_same_prompts(tokenizer):
    first = build(tokenizer, 10, 8, seed=5)
    assert build(tokenizer, 10, 8, seed=5) == first
    assert build(tokenizer, 10, 8, seed=6) != first


def test_sglangs_detokenize_answer_is_read(tokenizer):
    tokenizer.detokenize_key = "text"
    assert [p.input_tokens for p in build(tokenizer, 5, 6)] == [6] * 5


def test_an_endpoint_without_a_tokenizer_is_named_with_a_remedy():
    class NoTokenizer(ThreadingHTTPServer):
        daemon_threads = True

    class NotFound(JsonHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.reply(404, {"detail": "Not Found"})

    with (
        serving(NoTokenizer(("127.0.0.1", 0), NotFound)) as httpd,
        pytest.raises(WorkloadError) as caught,
    ):
        workload.build_prompts(root(httpd), "tiny", 2, 8, 8, 0.0, 0)
    assert f"{root(httpd)}/tokenize answered 404" in caught.value.found
    assert "inference.dataset" in caught.value.remedy


def test_bodies_fix_the_answer_length():
    bodies = workload.chat_bodies([Prompt("hi there", 2, 5), Prompt("yo", 1, 9)], "tiny")
    assert [b["max_tokens"] for b in bodies] == [5, 9]
    assert all(b["ignore_eos"] is True and b["model"] == "tiny" for b in bodies)
    assert bodies[1]["messages"] == [{"role": "user", "content": "yo"}]


# --- a sweep's prompts and levels ---------------------------------------------------------


def test_every_request_of_a_sweep_has_its_own_prompt(tokenizer):
    plan = Inference(
        concurrency=(1, 2),
        request_rates=(3.0,),
        requests_per_level=4,
        input_tokens=6,
        output_tokens=4,
        warmup_requests=2,
    )
    batches = workload.plan_prompts(plan, root(tokenizer), "tiny")
    assert [len(b) for b in batches] == [2, 4, 4, 4]
    texts = [p.text for b in batches for p in b]
    assert len(set(texts)) == len(texts)


def test_levels_are_labelled_and_sized_by_default():
    plan = Inference(concurrency=(1, 32), request_rates=(0.5, 10.0))
    planned = workload.levels(plan)
    assert [lv.label for lv in planned] == ["c=1", "c=32", "0.5 req/s", "10 req/s"]
    assert [lv.requests(plan) for lv in planned][:2] == [64, 128]  # max(64, 4 x c)
    assert planned[3].requests(plan) >= 10 * 30  # 30 s of arrivals at least
    assert planned[0].requests(Inference(requests_per_level=16)) == 16
    timed = Inference(concurrency=(1, 32), duration_s=60)
    assert [lv.requests(timed) for lv in workload.levels(timed)] == [64, 32 * 60]


# --- a dataset file -----------------------------------------------------------------------


def test_sharegpt_json_gives_the_first_human_turns(tmp_path: Path):
    data = [
        {"conversations": [{"from": "human", "value": "Q1"}, {"from": "gpt", "value": "A"}]},
        {"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Q2"}]},
    ]
    path = tmp_path / "share.json"
    path.write_text(json.dumps(data))
    prompts = workload.dataset_prompts(path, 3, 16)
    assert [(p.text, p.output_tokens) for p in prompts] == [("Q1", 16), ("Q2", 16), ("Q1", 16)]


def test_jsonl_lines_may_set_their_answer_length(tmp_path: Path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "one"}\n\n{"prompt": "two", "output_tokens": 5}\n')
    prompts = workload.dataset_prompts(path, 2, 16)
    assert [(p.text, p.output_tokens) for p in prompts] == [("one", 16), ("two", 5)]


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("bad.jsonl", '{"prompt": "ok"}\n{"prompt": \n', "line 2: not JSON"),
        ("bad.jsonl", '{"prompt": "ok"}\n{"text": "x"}\n', 'line 2: no "prompt" string'),
        ("bad.jsonl", '{"prompt": "x", "output_tokens": 0}\n', 'line 1: "output_tokens" 0'),
        ("bad.json", '[{"conversations": [{"from": "gpt", "value": "A"}]}]', "item [0]"),
        ("bad.json", '[{"conversations": ', "not JSON"),
        ("empty.jsonl", "\n", "holds no prompts"),
    ],
)
def test_a_malformed_dataset_names_the_key_and_the_line(tmp_path, name, content, says):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(WorkloadError) as caught:
        workload.dataset_prompts(path, 1, 8)
    assert str(caught.value).startswith("inference.dataset: ")
    assert says in caught.value.found
    assert "ShareGPT" in caught.value.remedy


def test_a_malformed_planned_dataset_stops_the_run_before_it_starts(pytester, tmp_path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "ok"}\n{"prompt": \n')
    plan = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    plan["inference"]["dataset"] = str(tmp_path / "prompts.jsonl")
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    result = pytester.runpytest_subprocess(
        *PROJECT_CONFIG,
        f"--inventory={tmp_path / 'plan.yaml'}",
        "--collect-only",
        *PHASE_DIRS,
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*inference.dataset: */prompts.jsonl, line 2: not JSON*"])


def test_a_missing_dataset_is_named(tmp_path: Path):
    with pytest.raises(WorkloadError, match=r"inference\.dataset: cannot read"):
        workload.dataset_prompts(tmp_path / "absent.jsonl", 1, 8)


# --- arrivals and run modes ---------------------------------------------------------------


def test_poisson_gaps_have_the_planned_mean_and_an_exponential_spread():
    gaps = list(itertools.islice(load.arrival_gaps(4.0, seed=3), 20_001))
    assert gaps[0] == 0.0  # the first request goes at once, as vLLM sends it
    rest = gaps[1:]
    assert statistics.fmean(rest) == pytest.approx(0.25, rel=0.05)
    assert statistics.stdev(rest) / statistics.fmean(rest) == pytest.approx(1.0, rel=0.05)
    assert list(itertools.islice(load.arrival_gaps(4.0, seed=3), 50)) == gaps[:50]
    assert list(itertools.islice(load.arrival_gaps(4.0, seed=4), 50)) != gaps[:50]


def test_a_duration_level_ends_and_counts_what_was_in_flight(server: SseServer):
    done: list[client.StreamRecord] = []
    run = load.run_load(
        base(server), "/chat/completions", [BODY] * 2, 2, 5.0, duration_s=0.6, on_done=done.append
    )
    assert len(run.records) >= 4  # each request takes 0.3 s: two waves at least
    assert run.repeated == len(run.records) - 2  # two bodies, sent again in turn
    assert all(r.ok for r in run.records)
    assert len(done) == len(run.records)  # those in flight at the deadline finished
    first = min(r.start_s for r in run.records)
    assert max(r.start_s for r in run.records) < first + 0.6 + 0.2  # none begun after it


def test_an_open_loop_level_sends_every_body_at_its_arrivals(server: SseServer):
    done: list[client.StreamRecord] = []
    run = load.run_open_loop(
        base(server), "/chat/completions", [BODY] * 6, 40.0, 5.0, seed=1, on_done=done.append
    )
    assert (len(run.records), run.rate, run.concurrency, run.repeated) == (6, 40.0, 0, 0)
    assert all(r.ok for r in run.records)
    assert len(done) == 6
    starts = [r.start_s for r in run.records]
    assert starts == sorted(starts)  # sent in arrival order
    arrivals = [r.arrival_s for r in run.records]
    assert None not in arrivals
    gaps = list(itertools.islice(load.arrival_gaps(40.0, seed=1), 6))[1:]
    assert [b - a for a, b in itertools.pairwise(arrivals)] == pytest.approx(gaps)


class WideSseServer(SseServer):
    request_queue_size = 64  # all the slots' connects at once


def test_an_arrival_past_the_cap_waits_and_its_queue_time_says_so():
    """SLOTS requests in flight (each 0.3 s), then two more arrive within the same
    milliseconds: they can only start when one of the first ends, and their queue time in
    the vLLM form is that wait, counted from their planned arrival."""
    slots = 16
    httpd = WideSseServer(("127.0.0.1", 0), Handler)
    httpd.requests = []
    with serving(httpd):
        run = load.run_open_loop(
            base(httpd),
            "/chat/completions",
            [BODY] * (slots + 2),
            10_000.0,
            30.0,
            seed=2,
            max_in_flight=slots,
        )
    assert [r.error for r in run.records if not r.ok] == []
    assert httpd.most_in_flight == slots
    waits = vllm_json.queue_times(run.records)
    assert all(r.arrival_s is not None and r.start_s >= r.arrival_s for r in run.records)
    first_end = min(r.end_s for r in run.records[:slots])
    late = run.records[slots:]
    assert all(r.start_s >= first_end for r in late)  # a slot freed first
    for wait, r in zip(waits[-2:], late, strict=True):
        assert r.arrival_s is not None
        assert wait == r.start_s - r.arrival_s >= first_end - r.arrival_s > 0


def test_progress_says_done_of_total_and_tokens_then_the_end():
    lines: list[str] = []
    progress = Progress("c=2", 3, lines.append, every_s=0.0)
    ok = client.StreamRecord(
        200, "", 0.0, (0.1,), 0.2, "x", "", "length", {"completion_tokens": 4}, ""
    )
    failed = client.StreamRecord(500, "HTTP 500", 0.0, (), 0.1, "", "", None, None, "")
    progress.on_done(ok)
    progress.on_done(failed)
    progress.on_done(ok)  # the last: the level's end says it, once
    progress.finish()
    assert lines[0].startswith("c=2: 1/3 done, ")
    assert lines[0].endswith(" tok/s so far")
    assert lines[1].startswith("c=2: 2/3 done, 1 failed, ")
    assert len(lines) == 3
    assert lines[2].startswith("c=2: 3/3 done, 1 failed, ")
    assert lines[2].endswith("(level done)")


def test_progress_is_quiet_between_its_lines():
    lines: list[str] = []
    progress = Progress("4 req/s", None, lines.append, every_s=3600)
    ok = client.StreamRecord(200, "", 0.0, (0.1,), 0.2, "x", "", "length", None, "")
    for _ in range(5):
        progress.on_done(ok)
    progress.finish(repeated=3)
    assert len(lines) == 1
    assert lines[0].endswith("(level done, 3 reused a prompt)")
    assert lines[0].startswith("4 req/s: 5 done, 0 tok/s")


def test_run_level_picks_the_loop_of_the_level(server: SseServer):
    plan = Inference(requests_per_level=2)
    closed = workload.run_level(base(server), Level(concurrency=2), [BODY] * 2, plan, 5.0)
    opened = workload.run_level(base(server), Level(rate=50.0), [BODY] * 2, plan, 5.0)
    assert (closed.concurrency, closed.rate, len(closed.records)) == (2, None, 2)
    assert (opened.concurrency, opened.rate, len(opened.records)) == (0, 50.0, 2)
