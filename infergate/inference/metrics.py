"""What `vllm bench serve` reports, computed from stream records and the wall duration.

The definitions are vLLM's (vllm/benchmarks/serve.py `calculate_metrics`); where they
differ, and why: docs/deploy-and-inference.md#level-figures.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from infergate.inference.client import StreamRecord
from infergate.inference.load import LoadRun
from infergate.plan.model import Slo

NO_SLO = Slo()


@dataclass(frozen=True)
class Distribution:
    """One per-request (or per-chunk) figure over a level, in milliseconds."""

    mean_ms: float
    median_ms: float
    std_ms: float  # the population's (numpy's default), as vLLM reports it
    p90_ms: float
    p95_ms: float
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
        return Distribution(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    ms = [s * 1000 for s in seconds]
    p90, p95, p99 = (percentile(ms, p) for p in (90, 95, 99))
    return Distribution(
        statistics.fmean(ms), statistics.median(ms), statistics.pstdev(ms), p90, p95, p99, len(ms)
    )


@dataclass(frozen=True)
class RequestTiming:
    """One completed request's figures, in seconds: TPOT None for a single-token answer, the
    usage counts (completion, prompt) None where the server sent none."""

    ttft_s: float
    latency_s: float
    output_tokens: int
    tpot_s: float | None
    itls_s: tuple[float, ...]
    content_chunks: int
    usage_tokens: int | None
    input_tokens: int | None


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
        input_tokens=prompt_tokens(record),
    )


def prompt_tokens(record: StreamRecord) -> int | None:
    """usage.prompt_tokens, as the server counted the prompt (its chat template included)."""
    tokens = (record.usage or {}).get("prompt_tokens")
    return tokens if isinstance(tokens, int) else None


@dataclass(frozen=True)
class Goodput:
    """The completed requests within every planned objective, as `--goodput` counts them,
    and how many missed each objective (a request may miss several)."""

    good: int
    per_s: float  # vLLM's request_goodput
    fraction: float  # of all requests of the level, failed ones included
    missed: tuple[tuple[str, int], ...]  # (ttft, tpot or e2el; requests over it)


def goodput(timings: Sequence[RequestTiming], sent: int, duration_s: float, slo: Slo) -> Goodput:
    """Of `sent` requests, those completed (`timings`) within every objective of `slo`."""
    terms = slo.terms
    missed = [{name for name, limit in terms.items() if _ms(t, name) > limit} for t in timings]
    good = sum(not names for names in missed)
    return Goodput(
        good=good,
        per_s=good / duration_s if duration_s > 0 else 0.0,
        fraction=good / sent if sent else 0.0,
        missed=tuple((name, sum(name in names for names in missed)) for name in terms),
    )


def _ms(timing: RequestTiming, name: str) -> float:
    """A request's figure by its --goodput name; a one-token answer's TPOT is 0, as vLLM
    counts it for goodput."""
    seconds = {"ttft": timing.ttft_s, "tpot": timing.tpot_s or 0.0, "e2el": timing.latency_s}
    return 1000 * seconds[name]


@dataclass(frozen=True)
class LevelSummary:
    """One level, as `vllm bench serve --max-concurrency N` (or `--request-rate R`) would
    print it; each figure: docs/deploy-and-inference.md#level-figures."""

    concurrency: int
    request_rate: float | None  # req/s of an open-loop level; None: closed loop
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    per_stream_tok_s: float
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2el: Distribution
    content_chunks: int
    usage_tokens: int
    usage_missing: int
    chunk_discrepancy: float
    errors: tuple[str, ...]
    goodput: Goodput | None  # None: no objective planned (inference.slo)

    @property
    def label(self) -> str:
        """How reports name the level: "c=16", or "4 req/s" for an open-loop rate."""
        if self.request_rate is not None:
            return f"{self.request_rate:g} req/s"
        return f"c={self.concurrency}"

    @property
    def tokens_per_chunk(self) -> float:
        return self.usage_tokens / self.content_chunks if self.content_chunks else 0.0


def summarize(run: LoadRun, slo: Slo = NO_SLO) -> LevelSummary:
    return summarize_records(
        run.records, run.duration_s, run.concurrency, request_rate=run.rate, slo=slo
    )


def summarize_records(
    records: Sequence[StreamRecord],
    duration_s: float,
    concurrency: int,
    *,
    request_rate: float | None = None,
    slo: Slo = NO_SLO,
) -> LevelSummary:
    timings = [t for r in records if (t := request_timing(r)) is not None]
    per_s = 1 / duration_s if duration_s > 0 else 0.0
    inputs = sum(t.input_tokens or 0 for t in timings)
    reported = [t for t in timings if t.usage_tokens is not None]
    chunks = sum(t.content_chunks for t in reported)
    tokens = sum(t.usage_tokens or 0 for t in reported)
    drift = sum(abs(t.content_chunks - (t.usage_tokens or 0)) for t in reported)
    total = sum(t.output_tokens for t in timings)
    tpot = distribution([t.tpot_s for t in timings if t.tpot_s is not None])
    return LevelSummary(
        concurrency=concurrency,
        request_rate=request_rate,
        completed=len(timings),
        failed=len(records) - len(timings),
        duration_s=duration_s,
        total_input_tokens=inputs,
        total_output_tokens=total,
        request_throughput=len(timings) * per_s,
        output_throughput=total * per_s,
        total_token_throughput=(inputs + total) * per_s,
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
        goodput=goodput(timings, len(records), duration_s, slo) if slo.terms else None,
    )


def _distinct_errors(records: Sequence[StreamRecord], keep: int = 5) -> tuple[str, ...]:
    errors = [failure(r) for r in records if not r.ok]
    return tuple(dict.fromkeys(errors))[:keep]


def failure(record: StreamRecord) -> str:
    """Why a request failed: its error, or an answer without text."""
    return record.error or f"HTTP {record.status}, no text streamed"


def summary_to_dict(summary: LevelSummary) -> dict[str, object]:
    return asdict(summary)


def summary_from_dict(data: Mapping[str, object]) -> LevelSummary:
    """The inverse of summary_to_dict (after a JSON round trip)."""
    values: dict[str, Any] = dict(data)
    for key in ("ttft", "tpot", "itl", "e2el"):
        values[key] = Distribution(**values[key])
    values["errors"] = tuple(values["errors"])
    if values["goodput"] is not None:
        missed = tuple((name, count) for name, count in values["goodput"]["missed"])
        values["goodput"] = Goodput(**{**values["goodput"], "missed": missed})
    return LevelSummary(**values)
