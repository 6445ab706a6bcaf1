"""Judges of the OpenAI API's answers, as clients rely on them. Pure: each takes what a
request returned (status, parsed JSON, a stream record) and returns problems.

Recorded forms (vLLM 0.32, the lab's engine): selftest/data/inference/.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infergate.inference.client import StreamRecord
from infergate.inference.plan import CHAT_PATH as CHAT
from infergate.inference.plan import chat_body
from infergate.inference.sse import framing_problems
from infergate.plan.apikey import WHERE
from infergate.problems import Problem

HEAD_LOG = "read the engine's log on the head at the time of the request"
KEY_REMEDY = f"the endpoint refuses the API key sent (or wants one): give its key with {WHERE}"


def body(path: str, model: str, prompt: str, max_tokens: int, **extra: object) -> dict[str, object]:
    """A request for PATH: one chat turn or a text prompt."""
    if path == CHAT:
        return chat_body(model, prompt, max_tokens, **extra)
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, **extra}


def check_models(status: int, answer: object, model: str) -> list[Problem]:
    """Sample: ``{"object":"list","data":[{"id":"tiny-qwen3-moe","object":"model",...}]}``"""
    listed = [str(m.get("id")) for m in _get(answer, "data") or [] if isinstance(m, dict)]
    if status == 200 and model in listed:
        return []
    remedy = (
        "launch with `--served-model-name` set to the plan's model.served_name, or "
        "fix model.served_name in the plan"
    )
    return [
        Problem(
            f"GET /v1/models: HTTP {status}, models {listed}",
            f"200 listing {model!r} (model.served_name)",
            KEY_REMEDY if status in (401, 403) else remedy,
        )
    ]


def check_answer(path: str, status: int, answer: object) -> list[Problem]:
    """A non-streamed answer: text, a finish_reason, and usage with completion tokens."""
    if status != 200:
        return [_http(path, status, answer)]
    choice = (_get(answer, "choices") or [{}])[0]
    text = _get(choice, "message", "content") if path == CHAT else _get(choice, "text")
    problems = []
    if not isinstance(text, str):
        problems.append(
            Problem(f"no text in {_short(answer)}", "choices[0] with its text", HEAD_LOG)
        )
    if _get(choice, "finish_reason") not in ("stop", "length"):
        problems.append(
            Problem(
                f"finish_reason {_get(choice, 'finish_reason')!r}",
                "finish_reason stop or length",
                HEAD_LOG,
            )
        )
    if not isinstance(_get(answer, "usage", "completion_tokens"), int):
        problems.append(
            Problem(
                f"usage {_get(answer, 'usage')!r}",
                "usage with prompt_tokens and completion_tokens",
                "clients bill and measure by usage: use an engine that reports it",
            )
        )
    return problems


def check_stream(record: StreamRecord) -> list[Problem]:
    """A streamed answer: HTTP 200, text, SSE framing, [DONE] last, usage (asked for)."""
    if record.status != 200 or (record.error and not record.raw):
        remedy = KEY_REMEDY if record.status in (401, 403) else HEAD_LOG
        return [Problem(f"stream failed: {record.error}", "HTTP 200 and a stream", remedy)]
    problems = framing_problems(record.raw, usage_expected=True)
    if not record.content_times:
        problems.append(Problem("no content chunk in the stream", "streamed text", HEAD_LOG))
    if record.finish_reason not in ("stop", "length"):
        problems.append(
            Problem(
                f"finish_reason {record.finish_reason!r} in the stream",
                "a last choice with finish_reason stop or length",
                HEAD_LOG,
            )
        )
    return problems


def check_max_tokens(status: int, answer: object, limit: int) -> list[Problem]:
    """With ignore_eos the answer is cut at exactly max_tokens, and says `length`."""
    if status != 200:
        return [_http(CHAT, status, answer)]
    tokens = _get(answer, "usage", "completion_tokens")
    reason = _get(answer, "choices", 0, "finish_reason")
    if tokens == limit and reason == "length":
        return []
    return [
        Problem(
            f"completion_tokens {tokens}, finish_reason {reason!r}",
            f"completion_tokens {limit} and finish_reason 'length' (max_tokens {limit})",
            "the engine does not honour max_tokens: check its version and flags",
        )
    ]


def check_status(path: str, status: int, answer: object) -> list[Problem]:
    """HTTP 200, before anything reads ANSWER as the model's: an error's text is no answer."""
    return [] if status == 200 else [_http(path, status, answer)]


def stop_word(answer: object) -> str | None:
    """A stop string from the greedy answer: its first word past the first third, or (a
    random model's answer may be one repeated syllable) two characters from its middle."""
    text = _get(answer, "choices", 0, "text")
    if not isinstance(text, str) or len(text.strip()) < 4:
        return None
    third, middle = len(text) // 3, len(text) // 2
    words = [m.group() for m in re.finditer(r"\w{3,}", text) if m.start() >= third]
    return words[0] if words else text[middle : middle + 2]


def silent_tokens(answer: object) -> str | None:
    """Why no stop string can come from an answer whose tokens decode to (almost) no text
    (docs/deploy-and-inference.md#silent-tokens); None for any other answer (an answer
    without tokens is the judge's to fail)."""
    text = _get(answer, "choices", 0, "text")
    tokens = _get(answer, "usage", "completion_tokens")
    if not isinstance(text, str) or len(text.strip()) >= 4 or not isinstance(tokens, int):
        return None
    if tokens < 4:
        return None
    return (
        f"the greedy answer's {tokens} tokens decode to {text!r} (special tokens, left out "
        "of the text): no stop string can be taken from it; a model with trained weights "
        "writes words"
    )


def check_stopped(first: object, status: int, stopped: object, stop: str) -> list[Problem]:
    """The same greedy answer, ending right before the stop string, finish_reason `stop`."""
    if status != 200:
        return [_http("/completions", status, stopped)]
    full = str(_get(first, "choices", 0, "text"))
    text = _get(stopped, "choices", 0, "text")
    reason = _get(stopped, "choices", 0, "finish_reason")
    expected = full[: full.index(stop)]
    # engines trim the whitespace next to a stop string differently: compare without it
    if isinstance(text, str) and text.strip() == expected.strip() and reason == "stop":
        return []
    return [
        Problem(
            f"text {text!r}, finish_reason {reason!r}",
            f"{expected!r} (the greedy answer cut before {stop!r}), finish_reason 'stop'",
            "the engine ignores `stop`: check its version",
        )
    ]


def check_repeatable(answers: Sequence[tuple[int, object]]) -> list[Problem]:
    """Greedy decoding (temperature 0) answers the same twice."""
    texts = [_get(a, "choices", 0, "message", "content") for _, a in answers]
    bad = [(s, a) for s, a in answers if s != 200]
    if bad:
        return [_http(CHAT, *bad[0])]
    if len(set(map(str, texts))) == 1:
        return []
    return [
        Problem(
            f"two greedy answers differ: {texts[0]!r} vs {texts[1]!r}",
            "the same answer at temperature 0",
            "nondeterminism across ranks: check that every node runs the same image "
            "and flags (`pytest -m preflight -k parity`)",
        )
    ]


@dataclass(frozen=True)
class BadRequest:
    name: str
    make: Callable[[dict[str, object]], object]  # a good request body -> the bad one
    expected: tuple[int, ...]  # an engine may answer one by design: Engine.answers_by_design


BAD_REQUESTS = (
    BadRequest("unknown-model", lambda b: {**b, "model": "no-such-model"}, (400, 404)),
    BadRequest("malformed-json", lambda b: '{"model": "x", "messages": ', (400, 422)),
    BadRequest("messages-not-a-list", lambda b: {**b, "messages": "not a list"}, (400, 422)),
    BadRequest("negative-max-tokens", lambda b: {**b, "max_tokens": -3}, (400, 422)),
)


def error_message(answer: object) -> object:
    """The error's message where OpenAI's client finds it: under "error" (OpenAI, vLLM), else
    at the top of the body (SGLang 0.5.23: {"object": "error", "message": ..., "code": 400});
    openai-python reads `body.get("error", body)` (_client.py, _make_status_error)."""
    nested = _get(answer, "error")
    return _get(nested if isinstance(nested, Mapping) else answer, "message")


def check_client_error(defect: BadRequest, status: int, answer: object) -> list[Problem]:
    """Samples: vLLM ``404 {"error":{"message":"The model `no-such-model` does not exist.
    ...","type":"NotFoundError","param":"model","code":404}}``; SGLang ``400 {"object":
    "error","message":"max_new_tokens must be at least 0, got -3.","type":"BadRequestError",
    "param":null,"code":400}``"""
    if status in defect.expected and isinstance(error_message(answer), str):
        return []
    if 200 <= status < 300:
        remedy = (
            f"the server answered a request it must refuse ({defect.name}): a client's "
            "mistake goes unnoticed; check the engine version, and report it upstream"
        )
    elif status in (401, 403):
        remedy = KEY_REMEDY
    elif status >= 500 or status == 0:
        remedy = (
            "a 5xx or no answer for a client's mistake hides real failures from "
            "monitoring: report it upstream, and check the engine version"
        )
    else:
        remedy = (
            "refused, but not as OpenAI clients read a refusal (the status, or a "
            'message under "error" or at the top of the body): check the engine '
            "version, or a proxy in front of it that rewrites errors"
        )
    return [
        Problem(
            f"HTTP {status} {_short(answer)}",
            f"HTTP {' or '.join(map(str, defect.expected))} with a JSON error message "
            '({"error": {"message": ...}} or {"message": ...})',
            remedy,
        )
    ]


def check_openai_client(
    model: str, listed: Sequence[str], chat: Any, chunks: Sequence[Any]
) -> list[Problem]:
    """What the official client parsed: the model listed, a chat answer with usage, and a
    stream whose last chunk carries usage."""
    problems = []
    if model not in listed:
        problems.append(
            Problem(
                f"client.models.list() gave {list(listed)}",
                f"{model!r} listed",
                "see the /v1/models test",
            )
        )
    if not chat.choices or chat.usage is None:
        problems.append(Problem(f"chat answer {chat!r:.200}", "choices and usage", HEAD_LOG))
    if not chunks or chunks[-1].usage is None:
        problems.append(
            Problem(
                f"{len(chunks)} stream chunk(s), last without usage",
                "a stream ending with usage (include_usage)",
                HEAD_LOG,
            )
        )
    return problems


def client_error(error: Exception) -> Problem:
    return Problem(
        f"the openai client raised {type(error).__name__}: {error}",
        "the official client works end to end",
        HEAD_LOG,
    )


def _http(path: str, status: int, answer: object) -> Problem:
    remedy = KEY_REMEDY if status in (401, 403) else HEAD_LOG
    return Problem(f"POST {path}: HTTP {status} {_short(answer)}", "HTTP 200", remedy)


def _short(answer: object) -> str:
    return repr(answer)[:240]


def _get(data: object, *keys: str | int) -> Any:
    """data[k1][k2]... or None where a step is missing."""
    for key in keys:
        if isinstance(key, int):
            data = data[key] if isinstance(data, list) and len(data) > key else None
        else:
            data = data.get(key) if isinstance(data, Mapping) else None
    return data
