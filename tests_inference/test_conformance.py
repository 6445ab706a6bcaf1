"""The OpenAI API as clients use it: models, chat and text completions, streamed and not,
with usage, finish reasons, max_tokens, stop strings, greedy repeatability, 4xx errors, and
the official `openai` client end to end."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from infergate.engines.registry import engine_for
from infergate.fixtures.endpoint import ServedBy, fail_blocked
from infergate.fixtures.plugin import skip_unconfigured
from infergate.inference import conformance as judge
from infergate.inference.client import get_json, post_json, stream_completion
from infergate.inference.endpoint import Endpoint
from infergate.plan.model import Inventory
from infergate.preflight.roots import Blocked

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

pytestmark = [pytest.mark.xdist_group("deployment"), pytest.mark.usefixtures("inference_report")]

CHAT, TEXT = "/chat/completions", "/completions"
NO_CLIENT = "the openai package is not installed: pip install 'pytest-infergate[openai]'"
PROMPT = "Write one short sentence about the sea."


def ask(endpoint: Endpoint, path: str, max_tokens: int, **extra: object) -> tuple[int, object]:
    body = judge.body(path, endpoint.model, PROMPT, max_tokens, **extra)
    key, ca = endpoint.api_key, endpoint.ca_bundle
    return post_json(endpoint.v1, path, body, endpoint.request_s, key, ca)


def test_endpoint_serves_one_request(endpoint_root: Blocked | None) -> None:
    """The endpoint answers HTTP within its wait, lists the planned model and answers one
    chat request: else this fails once, with the cause, and the rest is skipped naming it."""
    fail_blocked(endpoint_root)


def test_models_lists_the_planned_served_name(endpoint: Endpoint, served_by: ServedBy) -> None:
    """GET /v1/models lists the model under the name the plan serves it as."""
    status, answer = get_json(endpoint.v1, "/models", 30, endpoint.api_key, endpoint.ca_bundle)
    served_by.fail(judge.check_models(status, answer, endpoint.model))


@pytest.mark.parametrize("path", [CHAT, TEXT], ids=["chat", "text"])
def test_completion_answers_with_usage(endpoint: Endpoint, served_by: ServedBy, path: str) -> None:
    """A plain request gets text, a finish_reason and usage."""
    status, answer = ask(endpoint, path, max_tokens=16)
    served_by.fail(judge.check_answer(path, status, answer))


@pytest.mark.parametrize("path", [CHAT, TEXT], ids=["chat", "text"])
def test_stream_is_framed_and_ends_with_usage(
    endpoint: Endpoint, served_by: ServedBy, path: str
) -> None:
    """A streamed answer is SSE `data:` events, ends with `data: [DONE]`, and carries usage
    when `stream_options.include_usage` asks for it."""
    body = judge.body(path, endpoint.model, PROMPT, max_tokens=16)
    record = stream_completion(
        endpoint.v1, path, body, endpoint.request_s, endpoint.api_key, endpoint.ca_bundle
    )
    served_by.fail(judge.check_stream(record))


def test_max_tokens_is_honoured(endpoint: Endpoint, served_by: ServedBy) -> None:
    """An answer cut at max_tokens says so: completion_tokens == max_tokens, finish "length"."""
    status, answer = ask(endpoint, CHAT, max_tokens=5, ignore_eos=True)
    served_by.fail(judge.check_max_tokens(status, answer, 5))


def test_stop_string_ends_the_answer(endpoint: Endpoint, served_by: ServedBy) -> None:
    """A stop string taken from the greedy answer ends the answer right before it."""
    status, first = ask(endpoint, TEXT, max_tokens=24, temperature=0, ignore_eos=True)
    served_by.fail(judge.check_status(TEXT, status, first))
    stop = judge.stop_word(first)
    if stop is None and (silent := judge.silent_tokens(first)):
        pytest.skip(silent)
    if stop is None:
        pytest.fail(f"the greedy answer has no word to stop at: {first!r}", pytrace=False)
    status, stopped = ask(
        endpoint, TEXT, max_tokens=24, temperature=0, ignore_eos=True, stop=[stop]
    )
    served_by.fail(judge.check_stopped(first, status, stopped, stop))


def test_temperature_zero_repeats_itself(endpoint: Endpoint, served_by: ServedBy) -> None:
    """Greedy decoding gives the same answer twice."""
    answers = [ask(endpoint, CHAT, max_tokens=16, temperature=0) for _ in range(2)]
    served_by.fail(judge.check_repeatable(answers))


@pytest.mark.parametrize("defect", judge.BAD_REQUESTS, ids=lambda d: d.name)
def test_bad_request_gets_a_json_4xx(
    endpoint: Endpoint,
    served_by: ServedBy,
    plan_or_none: Inventory | None,
    defect: judge.BadRequest,
) -> None:
    """A client's mistake is answered 4xx with a JSON error, not 500 and not a hang."""
    by_design = engine_for(plan_or_none).answers_by_design if plan_or_none else {}
    if why := by_design.get(defect.name):
        pytest.skip(why)
    body = defect.make(judge.body(CHAT, endpoint.model, PROMPT, max_tokens=4))
    key, ca = endpoint.api_key, endpoint.ca_bundle
    status, answer = post_json(endpoint.v1, CHAT, body, endpoint.request_s, key, ca)
    served_by.fail(judge.check_client_error(defect, status, answer))


def test_openai_client_works_end_to_end(
    endpoint: Endpoint, served_by: ServedBy, pytestconfig: pytest.Config
) -> None:
    """The official `openai` Python client lists the model, chats, and streams."""
    # here, not at the top: an extra, the rest collects without it (selftest/unit/test_extras.py)
    try:
        import openai
    except ImportError:
        skip_unconfigured(pytestconfig, NO_CLIENT)  # a strict gate fails on what it did not run
    verified = openai.DefaultHttpxClient(verify=endpoint.ca_bundle or True)
    client = openai.OpenAI(
        base_url=endpoint.v1,
        api_key=endpoint.api_key or "none",
        timeout=endpoint.request_s,
        max_retries=0,
        http_client=verified,
    )
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]
    try:
        listed = [m.id for m in client.models.list()]
        chat = client.chat.completions.create(model=endpoint.model, messages=messages, max_tokens=8)
        stream = client.chat.completions.create(
            model=endpoint.model,
            messages=messages,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    except openai.OpenAIError as e:
        served_by.fail([judge.client_error(e)])
        return
    problems = judge.check_openai_client(endpoint.model, listed, chat, chunks)
    served_by.fail(problems)
