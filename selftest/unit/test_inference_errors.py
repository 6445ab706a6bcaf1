"""The 4xx judge on the real error answers of both engines (selftest/data/inference/
{vllm,sglang}-<defect>.txt: the body, then the status): vLLM nests the message under
"error" as OpenAI does, SGLang 0.5.23 puts it at the top of the body, and OpenAI's own client
reads both; each wrong answer gets the remedy its status points to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infergate.engines.registry import engine_for
from infergate.inference import conformance as judge

DATA = Path(__file__).parents[1] / "data" / "inference"
DEFECTS = {d.name: d for d in judge.BAD_REQUESTS}


def recorded(engine: str, defect: str) -> tuple[int, object]:
    text, status = (DATA / f"{engine}-{defect}.txt").read_text().rstrip("\n").rsplit("\n", 1)
    return int(status), json.loads(text)


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_vllm_refusals_pass(defect: str) -> None:
    assert judge.check_client_error(DEFECTS[defect], *recorded("vllm", defect)) == []


@pytest.mark.parametrize("defect", ["malformed-json", "messages-not-a-list", "negative-max-tokens"])
def test_sglang_top_level_error_message_passes(defect: str) -> None:
    status, answer = recorded("sglang", defect)
    assert status == 400
    assert "error" not in answer
    assert judge.check_client_error(DEFECTS[defect], status, answer) == []


def test_sglang_answers_an_unknown_model_and_that_is_named_as_its_design() -> None:
    defect = DEFECTS["unknown-model"]
    status, answer = recorded("sglang", "unknown-model")
    (problem,) = judge.check_client_error(defect, status, answer)
    assert problem.found.startswith("HTTP 200 {")
    assert problem.remedy.startswith("the server answered a request it must refuse (unknown-model)")
    # the suite skips it on SGLang
    assert "serving_base.py" in engine_for("sglang").answers_by_design[defect.name]
    assert defect.name not in engine_for("vllm").answers_by_design


@pytest.mark.parametrize(
    ("status", "remedy"),
    [
        (500, "a 5xx or no answer"),
        (0, "a 5xx or no answer"),
        (401, "the endpoint refuses the API"),
        (404, "refused, but not as OpenAI clients read"),
    ],
)
def test_the_remedy_follows_the_status(status: int, remedy: str) -> None:
    body = {"detail": "Not Found"} if status == 404 else {"error": {"message": "x"}}
    (problem,) = judge.check_client_error(DEFECTS["negative-max-tokens"], status, body)
    assert problem.remedy.startswith(remedy)


def test_a_message_that_is_not_text_is_not_an_error_message() -> None:
    body = {"error": {"message": {"nested": 1}}}
    assert judge.check_client_error(DEFECTS["negative-max-tokens"], 400, body)


def text_answer(text: str, tokens: int) -> dict[str, object]:
    return {"choices": [{"text": text}], "usage": {"completion_tokens": tokens}}


def test_tokens_that_decode_to_no_text_give_a_reason_to_skip_the_stop_string() -> None:
    reason = judge.silent_tokens(text_answer("", 24))
    assert reason
    assert reason.startswith("the greedy answer's 24 tokens decode to ''")
    assert judge.stop_word(text_answer("", 24)) is None


@pytest.mark.parametrize(
    "answer",
    [text_answer("a sea of words", 24), text_answer("", 0), text_answer("", 2), {"choices": []}],
)
def test_an_answer_with_text_or_without_tokens_is_judged_not_skipped(answer: object) -> None:
    assert judge.silent_tokens(answer) is None
