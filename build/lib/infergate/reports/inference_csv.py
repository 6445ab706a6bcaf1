"""results.csv: every level of the sweep as one CSV row, its figures under vLLM's names; an
empty cell where a figure does not apply (no request rate, no SLO)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from infergate.inference.metrics import LevelSummary
from infergate.reports.inference import Results
from infergate.reports.vllm_json import figures


def render_csv(results: Results) -> str:
    return levels_csv(results.levels)


def csv_row(summary: LevelSummary) -> dict[str, object]:
    goodput = summary.goodput
    return {
        "level": summary.label,
        "concurrency": summary.concurrency,
        "request_rate": summary.request_rate,
        "completed": summary.completed,
        "failed": summary.failed,
        "duration_s": summary.duration_s,
        "total_input_tokens": summary.total_input_tokens,
        "total_output_tokens": summary.total_output_tokens,
        "request_throughput": summary.request_throughput,
        "output_throughput": summary.output_throughput,
        "total_token_throughput": summary.total_token_throughput,
        "per_stream_tok_s": summary.per_stream_tok_s,
        "request_goodput": goodput.per_s if goodput else None,
        "goodput_fraction": goodput.fraction if goodput else None,
        **figures(summary),
    }


def levels_csv(levels: Sequence[LevelSummary]) -> str:
    """One row per level; an empty cell where a figure does not apply (no rate, no SLO)."""
    if not levels:
        return ""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(csv_row(levels[0])), lineterminator="\n")
    writer.writeheader()
    writer.writerows(csv_row(s) for s in levels)
    return out.getvalue()
