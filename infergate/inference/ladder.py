"""The long-context ladder: one request at each planned fraction of the context length, then
several at once at the top, each prompt exact in the server's own tokens; the context length
itself (the plan's engine flag, else the served one); and the judges of what each rung got.
Pure: fixtures/ladder.py sends and reads the logs (docs/context-ladder.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from infergate.checks.kv_budget import parse_token_count
from infergate.deploy.stacks import HUNG, waits_clause
from infergate.engines.registry import engine_for
from infergate.inference.client import StreamRecord
from infergate.plan.model import Inference, Inventory, Ladder
from infergate.problems import Problem

TEXT_PATH = "/completions"  # no chat template: the prompt is all the server counts
# usage.prompt_tokens may exceed the prompt's own count by what the server adds (a BOS), and
# the builder may miss by a few: within this many tokens, or this share of the target
SLACK_TOKENS = 8
SLACK_SHARE = 0.01
# where neither the plan nor the server names the context, the timeout budget assumes the
# seed's (two Sparks, Qwen3.5-122B: 131072 tokens)
BUDGET_CONTEXT = 131_072
PROMPT_BUILD_S = 30.0  # one prompt: a dozen tokenizer calls, each up to the prompt's length


@dataclass(frozen=True)
class Context:
    tokens: int
    source: str  # "--max-model-len 1024 (engine.flags)", or the served one


@dataclass(frozen=True)
class Rung:
    fraction: float  # of the context length
    input_tokens: int  # each prompt's, in the server's tokens
    output_tokens: int
    requests: int = 1  # sent at once

    @property
    def label(self) -> str:
        """How tests and reports name it: "75%", "95% x2"."""
        return f"{self.fraction:.0%}" + (f" x{self.requests}" if self.requests > 1 else "")

    @property
    def named(self) -> str:
        return f"rung {self.label} ({self.input_tokens} tokens in, {self.output_tokens} out)"

    @property
    def file_label(self) -> str:
        """Its name in a file's: "ladder-95pct-x2"."""
        return "ladder-" + self.label.replace("%", "pct").replace(" ", "-")


def slack(tokens: int) -> int:
    return max(SLACK_TOKENS, math.ceil(tokens * SLACK_SHARE))


def planned_context(flag: str, value: str | None) -> Context | None:
    """The context length the engine FLAG's VALUE sets; None where it is unset or leaves the
    engine to fit it (-1, auto)."""
    count = parse_token_count(value) if value else None
    return Context(count, f"{flag} {value} (engine.flags)") if count else None


def context_planned(plan: Inventory | None) -> Context | None:
    """The context length PLAN's engine flags set, by its engine's own flag."""
    if plan is None:
        return None
    engine = engine_for(plan)
    return planned_context(engine.context_flag, engine.planned_context(plan.engine.flags))


def parse_served_context(answer: object, model: str) -> int | None:
    """MODEL's max_model_len in a GET /v1/models answer (vLLM's and SGLang's model card).

    Sample: ``{"object":"list","data":[{"id":"smollm2-135m",...,"max_model_len":1024,...}]}``
    """
    data = answer.get("data") if isinstance(answer, dict) else None
    for card in data if isinstance(data, list) else []:
        if isinstance(card, dict) and card.get("id") == model:
            found = card.get("max_model_len")
            return found if isinstance(found, int) and found > 0 else None
    return None


def served_source(tokens: int) -> Context:
    return Context(tokens, f"the served max_model_len {tokens} (GET /v1/models; no engine flag)")


def check_context_served(planned: Context, served: int | None) -> list[Problem]:
    """The server serves at least the context length the plan gives it."""
    if served is None or served >= planned.tokens:
        return []
    return [
        Problem(
            found=f"the server serves a context of {served} tokens (GET /v1/models max_model_len)",
            planned=f"{planned.tokens} tokens, {planned.source}",
            remedy="launch with the plan's flags (the server runs others), or plan what it "
            f"serves: {served} tokens",
        )
    ]


def rungs_of(context: int, ladder: Ladder) -> tuple[Rung, ...]:
    """Each planned fraction of CONTEXT, its prompt leaving room for the answer and the
    slack; then the top one again with `overlapping` requests at once."""
    top = context - ladder.output_tokens - slack(context)
    out = ladder.output_tokens
    rungs = [Rung(f, max(1, min(math.floor(f * context), top)), out) for f in ladder.rungs]
    if ladder.overlapping > 1 and rungs:
        rungs.append(replace(rungs[-1], requests=ladder.overlapping))
    return tuple(rungs)


def deadline_s(rung: Rung, ladder: Ladder, request_s: float) -> float:
    """REQUEST_S, the request deadline, plus the rung's prompt tokens at the slowest prefill
    planned."""
    prefill = rung.input_tokens * rung.requests / ladder.min_prefill_tokens_per_s
    return request_s + prefill


def budget_s(plan: Inventory | None) -> float:
    """What the whole ladder may take: each rung's prompts built, then its deadline."""
    inference = plan.inference if plan else Inference()
    ladder = inference.ladder
    if not ladder.enabled:
        return 0.0
    planned = context_planned(plan)
    rungs = rungs_of(planned.tokens if planned else BUDGET_CONTEXT, ladder)
    request_s = inference.request_timeout_s
    return sum(r.requests * PROMPT_BUILD_S + deadline_s(r, ladder, request_s) for r in rungs)


def text_body(model: str, prompt: str, output_tokens: int) -> dict[str, object]:
    """A greedy text completion of exactly OUTPUT_TOKENS (ignore_eos)."""
    body = {"model": model, "prompt": prompt, "max_tokens": output_tokens}
    return {**body, "temperature": 0, "ignore_eos": True}


@dataclass(frozen=True)
class RungRun:
    """What one rung got: its records (none where its prompts could not be built, `unbuilt`
    then says why), its wall time, and what the head's log and each node's kernel log said
    while it ran (filled only where it failed)."""

    rung: Rung
    records: tuple[StreamRecord, ...]
    seconds: float
    unbuilt: str = ""
    head_log: str = ""
    kernel: tuple[str, ...] = ()
    stacks: tuple[str, ...] = ()  # where each engine process waited, a request having hung


def request_problems(rung: Rung, record: StreamRecord) -> list[str]:
    """What is wrong with one of RUNG's answers: an error, or token counts not as planned."""
    if not record.ok:
        said = engine_words(record.error) or f"HTTP {record.status}, no text"
        return [f"failed: {said}"]
    usage = record.usage or {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    wrong = []
    if not isinstance(prompt, int) or abs(prompt - rung.input_tokens) > slack(rung.input_tokens):
        wrong.append(f"usage.prompt_tokens {prompt}, not {rung.input_tokens}")
    if completion != rung.output_tokens:
        wrong.append(f"usage.completion_tokens {completion}, not {rung.output_tokens}")
    return wrong


def engine_words(error: str) -> str:
    """The server's own message in a StreamRecord's error (`HTTP 400: {"error": {...}}`)."""
    _, _, body = error.partition(": ")
    try:
        said = json.loads(body)
    except ValueError:
        return error
    inner = said.get("error", said) if isinstance(said, dict) else said
    message = inner.get("message") if isinstance(inner, dict) else None
    return f"{error.partition(':')[0]}: {message}" if isinstance(message, str) else error


def check_rung(run: RungRun) -> list[Problem]:
    """Every request of the rung completes, with its planned prompt and answer lengths;
    the problem names the rung, and what the head's log and the kernels said meanwhile."""
    found = [f"its prompts were not built: {run.unbuilt}"] if run.unbuilt else []
    for i, record in enumerate(run.records):
        which = f"request {i + 1} of {run.rung.requests} " if run.rung.requests > 1 else ""
        found += [f"{which}{p}" for p in request_problems(run.rung, record)]
    if not found:
        return []
    said = [f"the head's engine log meanwhile: {run.head_log}" if run.head_log else ""]
    said += [f"kernel log since the rung began: {'; '.join(run.kernel)}" if run.kernel else ""]
    said += [waits_clause(list(run.stacks))]
    return [
        Problem(
            found=f"{run.rung.named}: " + "; ".join(found + [s for s in said if s]),
            planned=f"every request completes with {run.rung.input_tokens} ± "
            f"{slack(run.rung.input_tokens)} prompt and {run.rung.output_tokens} completion tokens",
            remedy=(HUNG if run.stacks else "") + _REMEDY,
        )
    ]


_REMEDY = (
    "read the head's engine log around the rung (evidence/<head>/container.log); an Xid, an "
    "OOM or a node that reset means the context does not fit the nodes: plan a smaller "
    "--max-model-len (SGLang: --context-length), up to the last rung that passed "
    "(dgx-spark-playbooks#97: a 131K prefill reset a Spark head)"
)


@dataclass(frozen=True)
class RungFigures:
    """One rung as the report shows it: tokens in and out (summed over its requests), its
    wall time, tokens/s, first-token time, and its verdict with what it failed on."""

    rung: str
    fraction: float
    planned_input_tokens: int
    output_tokens: int
    requests: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    tokens_per_s: float
    ttft_s: float | None
    verdict: str  # passed | failed
    said: str = ""
    context: str = ""  # the context length climbed, and where it came from


def figures_of(run: RungRun, context: Context | None = None) -> RungFigures:
    usages = [r.usage or {} for r in run.records]
    tokens_in = sum(u.get("prompt_tokens") or 0 for u in usages if isinstance(u, dict))
    tokens_out = sum(u.get("completion_tokens") or 0 for u in usages if isinstance(u, dict))
    ttfts = [r.ttft_s for r in run.records if r.ttft_s is not None]
    problems = check_rung(run)
    rate = (tokens_in + tokens_out) / run.seconds if run.seconds > 0 else 0.0
    r = run.rung
    return RungFigures(
        *(r.label, r.fraction, r.input_tokens, r.output_tokens, r.requests),
        *(int(tokens_in), int(tokens_out), round(run.seconds, 3), round(rate, 1)),
        max(ttfts) if ttfts else None,
        "failed" if problems else "passed",
        problems[0].found if problems else "",
        f"{context.tokens} tokens, {context.source}" if context else "",
    )


def runs_for(runs: Sequence[RungRun], overlapping: bool) -> list[RungRun]:
    """The single-request rungs, or the overlapping one(s)."""
    return [r for r in runs if (r.rung.requests > 1) == overlapping]
