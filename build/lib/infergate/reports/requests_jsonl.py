"""requests.jsonl: every request of the sweep as one JSON line, times in ms from its level's
first start; never the request's body or its key."""

from __future__ import annotations

from collections.abc import Sequence

from infergate.inference.client import StreamRecord
from infergate.inference.metrics import LevelSummary, failure, prompt_tokens, request_timing


def request_lines(
    summary: LevelSummary, records: Sequence[StreamRecord]
) -> list[dict[str, object]]:
    """One JSON object per request, times in ms from the level's first start (never the
    request body or its key)."""
    first = min((r.start_s for r in records), default=0.0)
    return [_line(summary.label, r, first) for r in records]


def _line(level: str, r: StreamRecord, first: float) -> dict[str, object]:
    t = request_timing(r)
    return {
        "level": level,
        "start_offset_ms": (r.start_s - first) * 1000,
        "status": r.status,
        "error": "" if r.ok else failure(r),
        "input_tokens": prompt_tokens(r),
        "output_tokens": t.output_tokens if t else r.completion_tokens,
        "ttft_ms": r.ttft_s * 1000 if r.ttft_s is not None else None,
        "e2e_ms": (r.end_s - r.start_s) * 1000,
        "tpot_ms": t.tpot_s * 1000 if t and t.tpot_s is not None else None,
        "itl_ms": [gap * 1000 for gap in t.itls_s] if t else [],
        "finish_reason": r.finish_reason,
    }
