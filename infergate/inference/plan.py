"""What tests_inference sends, built from the inventory's `inference:` section, and the judges
of what came back: probes, failed requests and the planned thresholds.

The section, with its defaults:

    inference:
      concurrency: [1, 4, 16]        # levels, like `vllm bench serve --max-concurrency`
      request_rates: []              # open-loop levels, like `--request-rate` (req/s)
      requests_per_level: null       # max(64, 4 x the concurrency); or duration_s
      input_tokens: 1024             # prompts built by inference/workload.py
      output_tokens: 128
      spread: 0.0
      seed: 0
      warmup_requests: 2
      min_output_tokens_per_s: 300   # aggregate, at the highest level (default: not gated)
      max_ttft_ms: 500               # median, at concurrency 1 (default: not gated)
      baseline: baselines/two-sparks.json
      baseline_tolerance: 0.2
      thinking: false
      probes:
        - {prompt: "What is the capital of France? Answer in one word.", expect: "paris"}
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from infergate.inference.client import StreamRecord
from infergate.inference.metrics import LevelSummary
from infergate.inventory import Inference, Probe
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


def check_failures(summary: LevelSummary) -> list[Problem]:
    """No request of a level failed."""
    if not summary.failed:
        return []
    return [
        Problem(
            found=f"{summary.failed} of {summary.failed + summary.completed} requests failed "
            f"at concurrency {summary.concurrency}: {'; '.join(summary.errors)}",
            planned="every request completed",
            remedy="read the engine log on every node for the time of the run (OOM, a lost "
            "rank, a timeout); lower inference.concurrency only if the plan never meant it",
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


_SLOW_REMEDY = (
    "look for what slows the cluster: other GPU users (`nvidia-smi`), the fabric (NCCL busbw "
    "in preflight; NCCL_DEBUG=INFO should show NET/IB, not NET/Socket), power caps; or set "
    "the threshold to what this hardware does"
)
