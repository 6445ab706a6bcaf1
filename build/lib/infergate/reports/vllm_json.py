"""A level as `vllm bench serve --save-result --save-detailed` of vLLM 0.32.0 writes it, for
the tools that read that form (vllm-<level>.json): the same keys in the same order,
per-request lists in seconds, figures in ms. docs/reports.md says which vLLM code it follows
and what each request's queue time is."""

from __future__ import annotations

import math
from collections.abc import Sequence

from infergate.inference.client import StreamRecord
from infergate.inference.metrics import LevelSummary, failure, prompt_tokens, request_timing

VLLM_VERSION = "0.32.0"  # the `vllm bench serve` whose --save-result form is written
# LevelSummary's Distribution fields, by vLLM's names
FIGURES = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = ("p90", "p95", "p99")


def vllm_result(
    summary: LevelSummary, records: Sequence[StreamRecord], *, model: str, date: str
) -> dict[str, object]:
    """One level as vLLM's --save-result writes it (the module's docstring says which)."""
    timings = [request_timing(r) for r in records]
    ok = [r for r in records if r.ok]
    return {
        "date": date,  # vLLM's "%Y%m%d-%H%M%S"
        "endpoint_type": "openai-chat",
        "backend": "openai-chat",
        "label": summary.label,
        "model_id": model,
        "tokenizer_id": model,  # the served model's own, through the server
        "num_prompts": len(records),
        "request_rate": "inf" if summary.request_rate is None else summary.request_rate,
        "burstiness": 1.0,  # Poisson arrivals for a rate
        "max_concurrency": summary.concurrency if summary.request_rate is None else None,
        "duration": summary.duration_s,
        "completed": summary.completed,
        "failed": summary.failed,
        "total_input_tokens": summary.total_input_tokens,
        "total_output_tokens": summary.total_output_tokens,
        "request_throughput": summary.request_throughput,
        "request_goodput": summary.goodput.per_s if summary.goodput else None,
        "output_throughput": summary.output_throughput,
        "total_token_throughput": summary.total_token_throughput,
        "input_lens": [prompt_tokens(r) or 0 for r in records],
        "output_lens": [t.output_tokens if t else 0 for t in timings],
        "ttfts": [t.ttft_s if t else 0.0 for t in timings],
        "itls": [list(t.itls_s) if t else [] for t in timings],
        "latencies": [t.latency_s if t else 0.0 for t in timings],
        "start_times": [r.start_s for r in records],
        "queue_times": queue_times(records),
        "generated_texts": [r.text for r in records],
        "errors": ["" if r.ok else failure(r) for r in records],
        "max_output_tokens_per_s": peak_output_tokens_per_s(ok),
        "max_concurrent_requests": peak_concurrency(ok),
        "rtfx": 0.0,
        **figures(summary),
    }


def queue_times(records: Sequence[StreamRecord]) -> list[float]:
    """Each request's wait between its arrival and its send, in seconds (docs/reports.md
    says which arrival)."""
    first = min((r.start_s for r in records), default=0.0)
    return [r.start_s - (first if r.arrival_s is None else r.arrival_s) for r in records]


def figures(summary: LevelSummary) -> dict[str, float]:
    """mean_ttft_ms, median_ttft_ms, std_ttft_ms, p90_ttft_ms, ... in vLLM's order."""
    out: dict[str, float] = {}
    for name in FIGURES:
        d = getattr(summary, name)
        out |= {
            f"mean_{name}_ms": d.mean_ms,
            f"median_{name}_ms": d.median_ms,
            f"std_{name}_ms": d.std_ms,
        }
        out |= {f"{p}_{name}_ms": getattr(d, f"{p}_ms") for p in PERCENTILES}
    return out


def peak_output_tokens_per_s(ok: Sequence[StreamRecord]) -> float:
    """vLLM's "peak output token throughput": the most chunks (vLLM's tokens: one per ITL
    and the first) in any one-second bucket counted from the earliest start."""
    if not ok:
        return 0.0
    first = min(r.start_s for r in ok)
    buckets = [0] * (math.ceil(max(r.end_s for r in ok) - first) + 1)
    for t in (t for r in ok for t in r.content_times):
        buckets[int(t - first)] += 1
    return float(max(buckets))


def peak_concurrency(ok: Sequence[StreamRecord]) -> int:
    """The most requests in flight at once, over half-open [start, end) spans."""
    events = sorted([(r.start_s, 1) for r in ok] + [(r.end_s, -1) for r in ok])
    running = peak = 0
    # at a tie, an end (-1) sorts before a start
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak
