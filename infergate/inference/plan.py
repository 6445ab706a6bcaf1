"""What tests_inference sends, built from the inventory's `inference:` section, and the judges
of what came back: probes, failed requests and the planned thresholds.

The section's keys: docs/plan-keys.md; a sample of it:
docs/deploy-and-inference.md#the-inference-section.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from infergate.deploy.stacks import HUNG, waits_clause
from infergate.inference.client import StreamRecord
from infergate.inference.metrics import LevelSummary
from infergate.plan.model import Inference, Probe, Slo
from infergate.problems import Problem

CHAT_PATH = "/chat/completions"


def chat_body(model: str, prompt: str, max_tokens: int, **extra: object) -> dict[str, object]:
    """A one-turn chat request (client.stream_completion adds the streaming options)."""
    messages = [{"role": "user", "content": prompt}]
    return {"model": model, "messages": messages, "max_tokens": max_tokens, **extra}


def probe_body(probe: Probe, model: str) -> dict[str, object]:
    """Greedy, so that a correct model gives the expected answer every time."""
    return chat_body(model, probe.prompt, probe.max_tokens, temperature=0)


def check_probe(probe: Probe, record: StreamRecord, *, thinking: bool) -> list[Problem]:
    """The answer matches the probe's regex, in any case; the reasoning is no answer."""
    if not record.ok:
        return [_failed_probe(probe, record)]
    if record.reasoning and not thinking:
        return [
            Problem(
                found=f"reasoning streamed apart from the answer: {record.reasoning[:80]!r}",
                planned="inference.thinking: false (no reasoning fields)",
                remedy="set inference.thinking: true for a reasoning model, or launch without "
                "the engine's reasoning parser",
            )
        ]
    if re.search(probe.expect, record.text, re.IGNORECASE):
        return []
    out_of_tokens = record.finish_reason == "length"
    return [
        Problem(
            found=f"answer {record.text[:120]!r} (finish_reason {record.finish_reason}) "
            f"to {probe.prompt[:60]!r}",
            planned=f"an answer matching /{probe.expect}/i",
            remedy=f"raise this probe's max_tokens above {probe.max_tokens}"
            if out_of_tokens
            else "check the served weights (manifest digest in preflight), the chat template "
            "and the dtype/quantization flags; a wrong answer from a right model is rare",
        )
    ]


def _failed_probe(probe: Probe, record: StreamRecord) -> Problem:
    return Problem(
        found=f"probe {probe.prompt[:60]!r} failed: {record.error or 'no text streamed'}",
        planned="HTTP 200 and a streamed answer ending in `data: [DONE]`",
        remedy="read the engine log on the head node at the time of the request",
    )


def check_failures(summary: LevelSummary, stacks: Sequence[str] = ()) -> list[Problem]:
    """No request of a level failed; STACKS: where each rank waited, its requests having hung."""
    if not summary.failed:
        return []
    counted = f"{summary.failed} of {summary.failed + summary.completed} requests failed"
    said = [f"{counted} at {summary.label}: {'; '.join(summary.errors)}"]
    return [
        Problem(
            found="; ".join([*said, waits_clause(list(stacks))] if stacks else said),
            planned="every request completed",
            remedy=(HUNG if stacks else "") + "read the engine log on every node for the time "
            "of the run (OOM, a lost rank, a timeout); lower inference.concurrency only if the "
            "plan never meant it",
        )
    ]


def check_thresholds(summaries: Sequence[LevelSummary], inference: Inference) -> list[Problem]:
    """Aggregate tokens/s at the highest level, and median TTFT at concurrency 1, as planned."""
    problems = []
    top = max(summaries, key=lambda s: s.concurrency, default=None)
    floor = inference.min_output_tokens_per_s
    if top is not None and floor is not None and top.output_throughput < floor:
        problems.append(
            Problem(
                found=f"{top.output_throughput:.1f} output tok/s at concurrency {top.concurrency}",
                planned=f"at least {floor:g} (inference.min_output_tokens_per_s)",
                remedy=_SLOW_REMEDY,
            )
        )
    single = next((s for s in summaries if s.concurrency == 1), None)
    ceiling = inference.max_ttft_ms
    if single is not None and ceiling is not None and single.ttft.median_ms > ceiling:
        problems.append(
            Problem(
                found=f"median TTFT {single.ttft.median_ms:.1f} ms at concurrency 1",
                planned=f"at most {ceiling:g} ms (inference.max_ttft_ms)",
                remedy=_SLOW_REMEDY,
            )
        )
    return problems


def check_goodput(summary: LevelSummary, slo: Slo) -> list[Problem]:
    """At this level, at least the planned share of requests met every objective."""
    floor, found = slo.min_goodput_fraction, summary.goodput
    if floor is None or found is None or found.fraction >= floor:
        return []
    sent = summary.completed + summary.failed
    return [
        Problem(
            found=f"{found.good} of {sent} requests ({found.fraction:.0%}) within the SLO at "
            f"{summary.label} (goodput {found.per_s:.2f} req/s)",
            planned=f"at least {floor:.0%} (inference.slo.min_goodput_fraction) within "
            + ", ".join(f"{_SLO_NAMES[n]} {ms:g} ms" for n, ms in slo.terms.items()),
            remedy=_goodput_remedy(summary, slo),
        )
    ]


# vLLM's --goodput names: the plan's keys, and the figure each one bounds
_SLO_NAMES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms"}
_SLO_ADVICE = {
    "ttft": "requests wait for prefill: fewer concurrent requests, or more prefill capacity "
    "(chunked prefill, a larger max-num-batched-tokens)",
    "tpot": "decode is slow: see the TPOT per level against the sweep's lower levels; the "
    "fabric, other GPU users or power caps slow every step",
    "e2el": "whole requests take too long: shorter answers (output_tokens) or fewer "
    "concurrent requests",
}


def _goodput_remedy(summary: LevelSummary, slo: Slo) -> str:
    """Leads with the objective missed most, and that figure's distribution."""
    missed = dict(summary.goodput.missed) if summary.goodput else {}
    worst = max(missed, key=lambda name: missed[name])
    # the failures alone cost it
    if not missed[worst]:
        return (
            f"the {summary.completed} completed request(s) all met the SLO; {summary.failed} "
            "failed: "
            f"{'; '.join(summary.errors)}. Read the engine log on every node for their time"
        )
    figure = getattr(summary, worst)
    misses = "; ".join(f"{_SLO_NAMES[n]}: {c}" for n, c in missed.items())
    return (
        f"missed most: {_SLO_NAMES[worst]} ({missed[worst]} of {summary.completed} completed "
        f"requests over {slo.terms[worst]:g} ms; median {figure.median_ms:.1f}, p90 "
        f"{figure.p90_ms:.1f}, p99 {figure.p99_ms:.1f} ms) [requests over each: {misses}; "
        f"failed: {summary.failed}]. {_SLO_ADVICE[worst]}; or plan an SLO this hardware meets"
    )


_SLOW_REMEDY = (
    "look for what slows the cluster: other GPU users (`nvidia-smi`), the fabric (NCCL busbw "
    "in preflight; NCCL_DEBUG=INFO should show NET/IB, not NET/Socket), power caps; or set "
    "the threshold to what this hardware does"
)


def check_usage_reported(sweep: list[LevelSummary]) -> list[Problem]:
    """Each level where some streams reported no usage."""
    planned = "usage in the last chunk of every stream (stream_options.include_usage)"
    remedy = (
        "tokens/s is then counted from chunks, which undercounts: "
        "use an engine that honours include_usage"
    )
    return [
        Problem(f"{s.usage_missing} stream(s) without usage at {s.label}", planned, remedy)
        for s in sweep
        if s.usage_missing
    ]


def check_usage_counts_chunks(sweep: list[LevelSummary]) -> list[Problem]:
    """Each level whose usage counts fewer tokens than its streams' content chunks."""
    planned = "at least one token per content chunk"
    remedy = "the engine's usage undercounts: its tokens/s cannot be trusted"
    return [
        Problem(
            f"{s.usage_tokens} usage tokens for {s.content_chunks} content chunks at {s.label}",
            planned,
            remedy,
        )
        for s in sweep
        if s.usage_tokens < s.content_chunks
    ]
