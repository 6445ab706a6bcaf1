"""Reference parity without a cluster: the parser on the lab's vLLM 0.32.0 answer (recorded:
selftest/data/parity/), the comparison and judge on hand-made divergences, the reference
file's form, the plan's keys, and the run's usage errors at configure (collect-only)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from infergate.cli import main
from infergate.fixtures.endpoint import InferenceReport
from infergate.fixtures.parity import ParityRun
from infergate.inference.endpoint import Endpoint
from infergate.inference.parity import (
    Comparison,
    check_parity,
    compare,
    described,
    parse_chat_logprobs,
    request_of,
)
from infergate.inference.reference import (
    Answer,
    Position,
    Reference,
    ReferenceError,
    Topology,
    read_reference,
    reference_text,
)
from infergate.plan.model import InventoryError, Parity, parse_inventory
from infergate.problems import Problem
from infergate.reports.files import write_report
from infergate.reports.inference_html import render_html
from infergate.reports.inference_json import read_results
from selftest.local_http import JsonHandler, serving
from selftest.suite import (
    PHASE_DIRS,
    PROJECT_CONFIG,
    ROOT,
    SuiteRun,
    closed_plan,
    run_folder_in,
    run_suite,
)
from selftest.unit.test_cli import Execed, infergate
from selftest.unit.test_cli import execed as execed  # os.execv's stand-in
from selftest.unit.test_cli import no_plan_in_env as no_plan_in_env  # autouse
from selftest.unit.test_inference_lib import results

DATA = ROOT / "selftest" / "data" / "parity"
RECORDED = DATA / "vllm-0.32.0-chat-logprobs.json"
LAB_REFERENCE = DATA / "smollm2-one-node-reference.json"  # the same server's recording
FRANCE = Parity().prompts[0]


def answer(*tokens: str, logprob: float = -0.1, prompt: str = "p") -> Answer:
    """Each token chosen at LOGPROB, with "x" as its second choice 2 nats below."""
    return Answer(
        prompt, tuple(Position(t, logprob, ((t, logprob), ("x", logprob - 2))) for t in tokens)
    )


# --- the parser, on the recorded answer ---------------------------------------------------


def test_recorded_vllm_answer_parses_token_by_token():
    reply = json.loads(RECORDED.read_text())
    parsed = parse_chat_logprobs(FRANCE, reply)
    # the end of sequence is a position too, though the message's content leaves it out
    assert parsed.text == reply["choices"][0]["message"]["content"] + "<|im_end|>"
    assert len(parsed.positions) == reply["usage"]["completion_tokens"]
    assert parsed.finish_reason == reply["choices"][0]["finish_reason"]
    first = parsed.positions[0]
    assert len(first.top) == Parity().top_logprobs
    assert first.top[0] == (first.token, first.logprob)  # greedy: the top choice is chosen
    assert all(p.logprob <= 0 for p in parsed.positions)


def test_recorded_answer_matches_itself_with_no_drift():
    parsed = parse_chat_logprobs(FRANCE, json.loads(RECORDED.read_text()))
    found = compare(parsed, parsed)
    assert (found.matched, found.total, found.diverged, found.max_drift) == (
        len(parsed.positions),
        len(parsed.positions),
        False,
        0.0,
    )
    assert check_parity(found, Parity(), "here") == []


def test_lab_reference_reads_back_and_holds_the_same_answer():
    """Recorded through the suite from the server that gave RECORDED: the same tokens, and
    logprobs without drift (the lab's CPU engine is deterministic on one launch)."""
    ref = read_reference(LAB_REFERENCE.read_text())
    assert (ref.model, ref.topology.nodes, ref.topology.engine_version) == (
        "smollm2-135m",
        ("node1",),
        "0.32.0",
    )
    assert [a.prompt for a in ref.answers] == list(Parity().prompts)
    served = parse_chat_logprobs(FRANCE, json.loads(RECORDED.read_text()))
    found = compare(ref.answers[0], served)
    assert (found.matched, found.total, found.max_drift) == (9, 9, 0.0)
    assert served.text == "The capital city of France is Paris.<|im_end|>"


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ({"choices": []}, "no choices"),
        ({"choices": [{"message": {"content": "hi"}, "logprobs": None}]}, "no logprobs.content"),
        ({"choices": [{"logprobs": {"content": [{"token": "a"}]}}]}, "without token and logprob"),
        ("Internal Server Error", "no choices"),
    ],
)
def test_answer_without_logprobs_is_named(reply, says):
    with pytest.raises(ValueError, match=says):
        parse_chat_logprobs("p", reply)


# vLLM 0.32.0's CPU build in the lab, 2026-12-05: top_logprobs 25 against its default
# --max-logprobs; and the first request to an eager PP 2 launch, whose EngineCore then died
TOO_MANY = {"error": {"message": "Requested sample logprobs of 25, which is greater than max "
            "allowed: 20 (parameter=logprobs, value=25)", "type": "BadRequestError",
            "param": "logprobs", "code": 400}}  # fmt: skip
ENGINE_DIED = {"error": {"message": "EngineCore encountered an issue. See stack trace (above) "
               "for the root cause.", "type": "InternalServerError", "param": None,
               "code": 500}}  # fmt: skip


class Answering(JsonHandler):
    """Every chat request answered with STATUS and BODY."""

    status, body = 200, {}

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.reply(self.status, self.body)


NO_LOGPROBS = {"choices": [{"message": {"content": "hi"}, "logprobs": None}]}


@pytest.mark.parametrize(
    ("status", "body", "leads"),
    [
        (400, TOO_MANY, "vLLM refuses top_logprobs above its --max-logprobs"),
        (500, ENGINE_DIED, "the engine failed this request"),
        (None, None, "the endpoint answered before and now does not"),
        (200, NO_LOGPROBS, "an engine that answers chat with logprobs.content"),
        (404, {"error": {"message": "no such route"}}, "the status and body quoted"),
    ],
)
def test_a_prompt_with_no_answer_leads_its_fix_with_what_the_reply_shows(status, body, leads):
    """Asked of a real server (None: a port that refuses): only a refusal that names
    logprobs is told to mind --max-logprobs."""
    handler = type("Served", (Answering,), {"status": status, "body": body})
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as httpd:
        run = ParityRun(Endpoint(f"http://127.0.0.1:{httpd.server_address[1]}", "m"), Parity(),
                        None, InferenceReport())  # fmt: skip
        found = run.ask("p") if status is not None else None
    found = found or run.ask("p")  # None: asked once the server is closed
    assert isinstance(found, Problem), found
    assert found.remedy.startswith(leads), found.remedy


# --- the comparison and the judge ---------------------------------------------------------


def test_divergence_on_a_near_tie_names_position_tokens_and_numerics():
    ref = answer("The", " capital", " is", " Paris", ".", prompt=FRANCE)
    served = Answer(FRANCE, (*answer("The", " capital", logprob=-0.15).positions,
        *answer(" is", "x", ".").positions))  # fmt: skip
    found = compare(ref, served)
    assert (found.matched, found.reference_token, found.served_token) == (3, " Paris", "x")
    assert (found.rank, found.margin) == (2, pytest.approx(2.0))
    assert found.max_drift == pytest.approx(0.05)
    assert found.drift_at == 0
    [problem] = check_parity(found, Parity(min_matching_tokens=4), "1 node(s) (node1)")
    assert problem.found == (
        f"prompt {FRANCE!r}: first divergence at position 3: reference ' Paris', "
        "served 'x' (the reference's choice #2 there, 2.000 below) (3 of 5 tokens matched; "
        "max drift 0.050)"
    )
    assert "1 node(s) (node1)" in problem.planned
    assert "inference.parity.min_matching_tokens" in problem.planned
    assert problem.remedy.startswith("compare the chat template")  # 2 nats: no near tie


def test_near_tie_leads_the_fix_with_numerics():
    ref = Answer("p", (Position("a", -0.1), Position("b", -0.6, (("b", -0.6), ("c", -0.9)))))
    found = compare(ref, answer("a", "c"))
    [problem] = check_parity(found, Parity(min_matching_tokens=2), "here")
    assert problem.remedy.startswith("a near tie in the reference: topology-specific numerics")


def test_different_first_token_leads_the_fix_with_the_chat_template():
    found = compare(answer("The", " capital"), answer("Paris", " is"))
    [problem] = check_parity(found, Parity(), "here")
    assert "first divergence at position 0" in problem.found
    assert "served 'Paris' (not in the reference's top-k there)" in problem.found
    assert problem.remedy.startswith("compare the chat template")


def test_an_answer_ending_early_is_a_divergence_and_one_going_on_is_not():
    short = compare(answer("a", "b", "c"), answer("a"))
    assert (short.matched, short.served_token, short.diverged) == (1, None, True)
    [problem] = check_parity(short, Parity(min_matching_tokens=3), "here")
    assert "served nothing (the answer ended there)" in problem.found
    longer = compare(answer("a", "b"), answer("a", "b", "c"))
    assert (longer.matched, longer.total, longer.diverged) == (2, 2, False)


def test_a_reference_shorter_than_the_minimum_must_match_whole():
    found = compare(answer("a", "b"), answer("a", "b"))
    assert check_parity(found, Parity(min_matching_tokens=16), "here") == []
    diverged = compare(answer("a", "b"), answer("a", "z"))
    [problem] = check_parity(diverged, Parity(min_matching_tokens=16), "here")
    assert "the first 2 tokens as the reference recorded on here" in problem.planned


def test_drift_beyond_the_plan_names_its_position_and_key():
    found = compare(answer("a", "b", "c"), replace(answer("a", "b", "c"), positions=(
        Position("a", -0.1), Position("b", -0.9), Position("c", -0.1))))  # fmt: skip
    assert (found.max_drift, found.drift_at) == (pytest.approx(0.8), 1)
    [problem] = check_parity(found, Parity(max_logprob_drift=0.5), "here")
    assert (
        problem.found == "prompt 'p': logprob drift 0.800 at position 1 over the 3 matching tokens"
    )
    assert "at most 0.5 (inference.parity.max_logprob_drift)" in problem.planned
    assert problem.remedy.startswith("the same tokens with other probabilities: a lower precision")
    assert check_parity(found, Parity(max_logprob_drift=0.8), "here") == []


def test_comparison_row_has_every_field_for_the_report():
    row = compare(answer("a"), answer("b")).as_dict()
    assert set(row) == set(Comparison.__dataclass_fields__)
    assert json.loads(json.dumps(row))["reference_token"] == "a"


# --- the reference file and the plan ------------------------------------------------------


def test_reference_file_round_trips():
    ref = Reference(
        "smollm2-135m",
        Topology(("node1",), 1, 1, "img:1", "0.32.0", "http://h:8000"),
        request_of(Parity()),
        (answer("a", "b", prompt=FRANCE),),
        "2026-12-05T08:00:00+0000",
    )
    assert read_reference(reference_text(ref)) == ref
    assert described(ref.topology) == "1 node(s) (node1), TP 1 PP 1, img:1, engine 0.32.0"
    assert request_of(Parity()) == {
        "max_tokens": 32,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not JSON"),
        ('{"format": "infergate-baseline/1"}', "format 'infergate-baseline/1'"),
        ('{"format": "infergate-reference/1", "model": "m"}', "malformed: KeyError"),
    ],
)
def test_not_a_reference_is_named(text, says):
    with pytest.raises(ReferenceError, match=says):
        read_reference(text)


def lab_plan(**parity: object) -> dict:
    plan = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    plan["inference"]["parity"] = parity
    return plan


def test_plan_parity_keys_and_defaults():
    assert parse_inventory(lab_plan()).inference.parity == Parity()
    given = parse_inventory(lab_plan(reference="ref.json", prompts=["Hi"], top_logprobs=20))
    assert given.inference.parity.prompts == ("Hi",)
    with pytest.raises(InventoryError, match=r"inference\.parity\.top_logprobs"):
        parse_inventory(lab_plan(top_logprobs=21))
    with pytest.raises(InventoryError, match=r"inference\.parity\.prompts"):
        parse_inventory(lab_plan(prompts=[]))


# --- the run, at configure ----------------------------------------------------------------


def collect(pytester: pytest.Pytester, plan: dict, *args: str) -> pytest.RunResult:
    path = pytester.path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return pytester.runpytest_subprocess(
        *PROJECT_CONFIG, f"--inventory={path}", "--collect-only", "-q", *args, *PHASE_DIRS
    )


def write_reference(folder: Path, model: str, prompts: tuple[str, ...]) -> Path:
    answers = tuple(answer("a", prompt=p) for p in prompts)
    ref = Reference(model, Topology(), request_of(Parity()), answers)
    path = folder / "ref.json"
    path.write_text(reference_text(ref))
    return path


def test_a_reference_of_another_model_is_a_usage_error_naming_the_key(pytester):
    path = write_reference(pytester.path, "qwen3-0.6b", Parity().prompts)
    result = collect(pytester, lab_plan(reference=str(path)))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*inference.parity.reference: */ref.json was recorded for model 'qwen3-0.6b', this run "
         "serves 'smollm2-135m'*"]
    )  # fmt: skip


def test_a_missing_or_partial_reference_is_a_usage_error(pytester):
    missing = collect(pytester, lab_plan(reference=str(pytester.path / "absent.json")))
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*inference.parity.reference: *absent.json: No such file*"])
    path = write_reference(pytester.path, "smollm2-135m", Parity().prompts[:2])
    partial = collect(pytester, lab_plan(reference=str(path)))
    assert partial.ret == pytest.ExitCode.USAGE_ERROR
    partial.stderr.fnmatch_lines(["*inference.parity.prompts: 4 not in the reference*"])
    path = write_reference(pytester.path, "smollm2-135m", Parity().prompts)
    shorter = collect(pytester, lab_plan(reference=str(path), max_tokens=16))
    assert shorter.ret == pytest.ExitCode.USAGE_ERROR
    shorter.stderr.fnmatch_lines(
        [
            "*inference.parity.max_tokens: */ref.json was recorded with max_tokens 32, "
            "this plan asks 16*"
        ]
    )


def test_one_test_per_prompt_of_the_reference_and_a_skip_without_one(pytester):
    path = write_reference(pytester.path, "smollm2-135m", Parity().prompts)
    judged = collect(pytester, lab_plan(reference=str(path)), "-k", "test_reference_parity")
    test = "tests_inference/test_reference_parity.py::test_answer_matches_the_reference"
    assert [line for line in judged.outlines if line.startswith(test)] == [
        f"{test}[prompt{i}]" for i in range(6)
    ]
    plain = pytester.runpytest_subprocess(
        *PROJECT_CONFIG, "--endpoint=http://127.0.0.1:9", "-rs",
        str(ROOT / "tests_inference" / "test_reference_parity.py"),
    )  # fmt: skip
    plain.stdout.fnmatch_lines(["*no reference: set inference.parity.reference*"])


def test_a_recording_never_writes_over_a_file(pytester):
    (pytester.path / "there.json").write_text("{}")
    result = collect(pytester, lab_plan(), "--record-reference=there.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--record-reference */there.json: the file is there*"])


# --- the command ----------------------------------------------------------------------------


def test_reference_record_runs_the_parity_test_alone_recording(tmp_path):
    """`infergate reference record` becomes pytest on the parity test with --record-reference;
    from another folder it collects one test per planned prompt."""
    argv = ["reference", "record", "--plan", str(ROOT / "inventories" / "lab.yaml")]
    argv += ["--out", "ref.json", "--collect-only", "-q", "-p", "no:cacheprovider"]
    run = infergate(*argv, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    listed = [line for line in run.stdout.splitlines() if "test_answer_matches" in line]
    assert len(listed) == len(Parity().prompts), run.stdout
    (tmp_path / "ref.json").write_text("{}")
    again = infergate(*argv, cwd=tmp_path)
    assert again.returncode == pytest.ExitCode.USAGE_ERROR, again.stdout + again.stderr
    assert "ref.json: the file is there" in again.stderr


@pytest.mark.usefixtures("execed")
def test_reference_record_passes_the_endpoint_and_the_rest_on():
    with pytest.raises(Execed) as became:
        main(["reference", "record", "--plan=p.yaml", "--out=r.json", "--endpoint=http://h:8000"])
    (argv,) = became.value.args
    assert argv[argv.index("--pyargs") :] == [
        "--pyargs",
        "infergate.tests_inference.test_reference_parity",
        "-m",
        "inference",
        "--plan=p.yaml",
        "--record-reference=r.json",
        "--endpoint=http://h:8000",
    ]


# --- the report ---------------------------------------------------------------------------


def test_with_the_endpoint_down_each_prompt_is_skipped_naming_its_root(pytester):
    """A planned reference and nothing listening: no prompt is asked, each names the root."""
    plan = yaml.safe_load(closed_plan(pytester.path).read_text())
    reference = write_reference(pytester.path, "smollm2-135m", Parity().prompts)
    plan["inference"]["parity"] = {"reference": str(reference)}
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), JsonHandler)) as httpd:
        closed = f"http://127.0.0.1:{httpd.server_address[1]}"
    run = suite(pytester, "down", plan, f"--endpoint={closed}", "--endpoint-wait=0")
    assert len(run.outcomes) == len(Parity().prompts), run.output
    root = "refused the connection (test_endpoint_serves_one_request)"
    assert all(o.status == "skipped" and root in o.message for o in run.outcomes.values()), (
        run.output
    )


def test_report_shows_and_results_json_keeps_each_prompt(tmp_path):
    served = compare(answer("a", "b"), answer("a", "<b>"))
    rows = (
        {**served.as_dict(), "passed": False},
        {**compare(answer("a"), answer("a")).as_dict(), "passed": True},
    )
    made = replace(results(), parity=rows)
    json_path, html_path = write_report(tmp_path / "run", made)
    assert read_results(json_path).parity == rows
    page = html_path.read_text()
    assert "<h2>Reference parity</h2>" in page
    assert "<td>1 / 2</td><td>1</td><td>&#x27;b&#x27;</td><td>&#x27;&lt;b&gt;&#x27;</td>" in page
    assert "<span class=fail>failed</span>" in page
    assert "<span class=pass>passed</span>" in page
    assert "Reference parity" not in render_html(results())  # not judged: no section


# --- the suite, against a local server in vLLM's form --------------------------------------


class Replay(JsonHandler):
    """vLLM's routes as the suite reads them; each prompt answered with the tokens of
    TOKENS, "w0 w1 ...", where a CHANGED server says "x" in place of w2 to the first prompt."""

    changed = False

    def do_GET(self) -> None:
        if self.path == "/version":
            return self.reply(200, {"version": "0.32.0"})
        self.reply(200, {"object": "list", "data": [{"id": "smollm2-135m"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        tokens = [f" w{i}" for i in range(8)]
        if self.changed and prompt == FRANCE:
            tokens[2] = " x"
        content = [{"token": t, "logprob": -0.5, "top_logprobs": [{"token": t, "logprob": -0.5}]}
                   for t in tokens]  # fmt: skip
        choice = {"message": {"content": "".join(tokens)}, "finish_reason": "length"}
        self.reply(200, {"choices": [{**choice, "logprobs": {"content": content}}]})


@contextmanager
def replaying(changed: bool) -> Iterator[str]:
    handler = type("Served", (Replay,), {"changed": changed})
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as httpd:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"


def suite(pytester: pytest.Pytester, name: str, plan: dict, *args: str) -> SuiteRun:
    path = pytester.path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plan))
    report = ("--report-dir", str(pytester.path / name))
    return run_suite(
        pytester, "-m", "inference", "-k", "test_reference_parity", *report, *args, inventory=path
    )


PROMPT0 = "test_reference_parity.py::test_answer_matches_the_reference[prompt0]"


def test_recorded_then_judged_green_and_red_naming_the_position(pytester):
    """The whole path in the suite: recorded from a server, which judged against it is
    green; a server that answers the first prompt otherwise is red there alone, at 2."""
    reference = pytester.path / "reference.json"
    plan = yaml.safe_load(closed_plan(pytester.path).read_text())
    with replaying(changed=False) as base:
        made = suite(
            pytester, "record", plan, f"--endpoint={base}", f"--record-reference={reference}"
        )
        plan["inference"]["parity"] = {"reference": str(reference), "min_matching_tokens": 4}
        same = suite(pytester, "same", plan, f"--endpoint={base}")
    assert made.red() == set(), made.output
    assert len(read_reference(reference.read_text()).answers) == len(Parity().prompts)
    assert same.red() == set(), same.output
    with replaying(changed=True) as base:
        changed = suite(pytester, "changed", plan, f"--endpoint={base}")
    assert changed.red() == {PROMPT0}, changed.output
    said = changed.message(PROMPT0)
    assert "first divergence at position 2: reference ' w2', served ' x' (not in the" in said
    assert "node1 (127.0.0.1)" in said  # the plan's head: the endpoint is its address
    rows = read_results(run_folder_in(pytester.path / "changed") / "results.json").parity
    assert [r["matched"] for r in rows] == [2, 8, 8, 8, 8, 8]
