"""The raw samples behind the report's pictures, kept apart from the figures (results.json
holds the figures; requests.jsonl each request): what one level's requests saw, and what the
engine's own /metrics said while the load ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infergate.inference.client import StreamRecord
from infergate.inference.metrics import request_timing


@dataclass(frozen=True)
class LevelSamples:
    """One level of the load, as its pictures need it."""

    label: str  # "c=16", or "4 req/s" for an open-loop rate
    ttft_ms: tuple[float, ...]  # per completed request
    itl_ms: tuple[float, ...]  # pooled over the requests
    # (seconds since the level began, output tokens) per content chunk, in arrival order; a
    # request's usage tokens are spread evenly over its chunks
    output_tokens_at: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class EngineSample:
    """One scrape of the engine's Prometheus /metrics during the load."""

    t_s: float  # seconds since the load began (the warm-up excluded)
    level: str  # the LevelSamples.label running at the time
    values: Mapping[str, float]  # kv_cache_usage (0..1), running, waiting, preemptions (total)


def level_samples(label: str, records: Sequence[StreamRecord], began_s: float) -> LevelSamples:
    """The samples of one level's completed requests, from the figures metrics reads off
    each (request_timing); BEGAN_S is the level's start on the records' perf_counter clock."""
    done = [(r, t) for r in records if (t := request_timing(r)) is not None]
    arrivals = sorted(
        (at - began_s, t.output_tokens / t.content_chunks)
        for r, t in done
        for at in r.content_times
    )
    return LevelSamples(
        label=label,
        ttft_ms=tuple(t.ttft_s * 1000 for _, t in done),
        itl_ms=tuple(gap * 1000 for _, t in done for gap in t.itls_s),
        output_tokens_at=tuple(arrivals),
    )
