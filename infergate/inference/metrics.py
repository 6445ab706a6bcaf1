"""What `vllm bench serve` reports, computed from stream records and the wall duration.

Its definitions (vllm/benchmarks/serve.py `calculate_metrics`, and the request functions in
vllm/benchmarks/lib/endpoint_request_func.py), followed here:

- output tokens: `usage.completion_tokens` of the final chunk (vLLM falls back to
  re-tokenizing the text; with no tokenizer here, the content chunk count stands in and
  `usage_missing` says how often);
- TPOT per request: (latency - TTFT) / (output tokens - 1), only for requests with more than
  one token (the others are left out of TPOT, not counted as 0);
- ITL: every gap between consecutive chunks of every request, pooled: one gap per chunk, so
  a chunk that packs several tokens (speculative decoding, stream intervals) gives one long
  gap, not several short ones. TPOT spreads that same time over tokens; hence ITL and TPOT
  disagree whenever chunks carry more than one token;
- E2E latency: request start to the last JSON event (for chat, the usage chunk);
- request and output token throughput: completed requests and summed output tokens over the
  whole level's wall duration (warm-up excluded);
- mean, median and p99 as numpy computes them (p99 by linear interpolation); an empty set
  reports 0, as vLLM does (`count` tells it apart here).

Where this differs from vLLM: vLLM's chat client takes the first chunk with any `choices`
as the first token, the role-only `{"role":"assistant","content":""}` chunk included, and
counts the gap after it as an ITL; here only chunks carrying text (or reasoning) count,
which moves TTFT by the microseconds between those two chunks and drops one near-zero ITL
per request. vLLM counts a chat request with HTTP 200 and no exception as completed; here a
request also needs text and `data: [DONE]`. vLLM's "peak output tokens/s" is not computed.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from infergate.inference.client import LoadRun, StreamRecord


@dataclass(frozen=True)
class Distribution:
    """Mean, median and p99 of one per-request (or per-chunk) figure, in milliseconds."""

    mean_ms: float
    median_ms: float
    p99_ms: float
    count: int


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile by linear interpolation between ranks (numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(seconds: Sequence[float]) -> Distribution:
    if not seconds:
        return Distribution(0.0, 0.0, 0.0, 0)
    ms = [s * 1000 for s in seconds]
    return Distribution(statistics.fmean(ms), statistics.median(ms), percentile(ms, 99), len(ms))


@dataclass(frozen=True)
class RequestTiming:
    """One completed request's figures, in seconds."""

    ttft_s: float
    latency_s: float
    output_tokens: int
    tpot_s: float | None  # None for a single-token answer
    itls_s: tuple[float, ...]
    content_chunks: int
    usage_tokens: int | None  # usage.completion_tokens, when the server sent it


def request_timing(record: StreamRecord) -> RequestTiming | None:
    """A record's figures; None for a failed request."""
    if not record.ok or record.ttft_s is None:
        return None
    latency = record.end_s - record.start_s
    tokens = record.completion_tokens
    output = tokens if tokens is not None else record.content_chunks
    times = record.content_times
    return RequestTiming(
        ttft_s=record.ttft_s,
        latency_s=latency,
        output_tokens=output,
        tpot_s=(latency - record.ttft_s) / (output - 1) if output > 1 else None,
        itls_s=tuple(b - a for a, b in itertools.pairwise(times)),
        content_chunks=record.content_chunks,
        usage_tokens=tokens,
    )


@dataclass(frozen=True)
class LevelSummary:
    """One concurrency level, as `vllm bench serve --max-concurrency N` would print it."""

    concurrency: int
    completed: int
    failed: int
    duration_s: float
    total_output_tokens: int
    request_throughput: float  # completed requests / s
    output_throughput: float  # output tokens / s, all streams together
    per_stream_tok_s: float  # decode speed one client sees: 1000 / median TPOT ms
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2el: Distribution
    content_chunks: int  # over requests that reported usage
    usage_tokens: int  # their usage.completion_tokens
    usage_missing: int  # completed requests without usage
    chunk_discrepancy: float  # sum |chunks - tokens| / sum tokens; 0: one token per chunk
    errors: tuple[str, ...]  # distinct errors of failed requests, the first few

    @property
    def tokens_per_chunk(self) -> float:
        return self.usage_tokens / self.content_chunks if self.content_chunks else 0.0


def summarize(run: LoadRun) -> LevelSummary:
    return summarize_records(run.records, run.duration_s, run.concurrency)


def summarize_records(
    records: Sequence[StreamRecord], duration_s: float, concurrency: int
) -> LevelSummary:
    timings = [t for r in records if (t := request_timing(r)) is not None]
    reported = [t for t in timings if t.usage_tokens is not None]
    chunks = sum(t.content_chunks for t in reported)
    tokens = sum(t.usage_tokens or 0 for t in reported)
    drift = sum(abs(t.content_chunks - (t.usage_tokens or 0)) for t in reported)
    total = sum(t.output_tokens for t in timings)
    tpot = distribution([t.tpot_s for t in timings if t.tpot_s is not None])
    return LevelSummary(
        concurrency=concurrency,
        completed=len(timings),
        failed=len(records) - len(timings),
        duration_s=duration_s,
        total_output_tokens=total,
        request_throughput=len(timings) / duration_s if duration_s > 0 else 0.0,
        output_throughput=total / duration_s if duration_s > 0 else 0.0,
        per_stream_tok_s=1000 / tpot.median_ms if tpot.median_ms > 0 else 0.0,
        ttft=distribution([t.ttft_s for t in timings]),
        tpot=tpot,
        itl=distribution([gap for t in timings for gap in t.itls_s]),
        e2el=distribution([t.latency_s for t in timings]),
        content_chunks=chunks,
        usage_tokens=tokens,
        usage_missing=len(timings) - len(reported),
        chunk_discrepancy=drift / tokens if tokens else 0.0,
        errors=_distinct_errors(records),
    )


def _distinct_errors(records: Sequence[StreamRecord], keep: int = 5) -> tuple[str, ...]:
    errors = [r.error or f"HTTP {r.status}, no text streamed" for r in records if not r.ok]
    return tuple(dict.fromkeys(errors))[:keep]


def summary_to_dict(summary: LevelSummary) -> dict[str, object]:
    return asdict(summary)


def summary_from_dict(data: Mapping[str, object]) -> LevelSummary:
    """The inverse of summary_to_dict (after a JSON round trip)."""
    values: dict[str, Any] = dict(data)  # the shape summary_to_dict wrote
    for key in ("ttft", "tpot", "itl", "e2el"):
        values[key] = Distribution(**values[key])
    values["errors"] = tuple(values["errors"])
    return LevelSummary(**values)
