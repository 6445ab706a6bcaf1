"""The inference report's pictures, each a base64 PNG for report.html to inline: the sweep's
figures per level, the latency-throughput curve, the TTFT and ITL distributions, the output
tokens over time and the engine's own /metrics over the load.

matplotlib is imported at the first plot, not by every pytest run that loads the suite's
plugins (docs/deploy-and-inference.md#report-pictures); a bare Figure needs no display. It is
the `plots` extra: without it the report is written with no pictures (`available`).
"""

from __future__ import annotations

import base64
import importlib.util
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from infergate.inference.metrics import LevelSummary, percentile
from infergate.inference.samples import EngineSample, LevelSamples
from infergate.reports.inference import Gates

GET_THEM = "pip install 'pytest-infergate[plots]'"


def available() -> bool:
    """Whether matplotlib can be found, without importing it (it is the `plots` extra)."""
    return importlib.util.find_spec("matplotlib") is not None


@dataclass(frozen=True)
class Picture:
    alt: str  # what the picture shows, with its numbers, for a reader who cannot see it
    png: str  # base64


def _figure(rows: int = 1, height: float = 3.4) -> tuple[Any, Any]:
    """A figure and its axes (an array of them for rows > 1, sharing x)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.8, height))  # two side by side in the report's 1100 px
    return fig, fig.subplots(rows, 1, sharex=True)


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def plot_throughput(levels: Sequence[LevelSummary], gates: Gates) -> Picture:
    """Output tokens/s against concurrency; the plan's floor, where set."""
    fig, ax = _figure()
    x = [s.concurrency for s in levels]
    ax.plot(x, [s.output_throughput for s in levels], "o-", label="all streams")
    ax.plot(x, [s.per_stream_tok_s for s in levels], "s--", label="per stream")
    drawn = _gate(ax, gates.min_output_tok_s, "floor, at the highest level", "tok/s")
    _concurrency_axes(ax, x, "output tokens/s")
    each = ", ".join(f"{s.label} {s.output_throughput:.1f}" for s in levels)
    alt = f"Output tokens/s of all streams against concurrency: {each}{drawn}"
    return Picture(alt, _png(fig))


def plot_ttft(levels: Sequence[LevelSummary], gates: Gates) -> Picture:
    """Median and p99 TTFT against concurrency; the plan's limits, where set."""
    fig, ax = _figure()
    x = [s.concurrency for s in levels]
    ax.plot(x, [s.ttft.median_ms for s in levels], "o-", label="median")
    ax.plot(x, [s.ttft.p99_ms for s in levels], "^--", label="p99")
    drawn = _gate(ax, gates.max_ttft_ms, "limit of the median at c=1", "ms")
    drawn += _gate(ax, gates.slo_ttft_ms, "SLO per request", "ms", ":")
    _concurrency_axes(ax, x, "time to first token (ms)")
    each = ", ".join(f"{s.label} {s.ttft.median_ms:.1f} and {s.ttft.p99_ms:.1f} ms" for s in levels)
    return Picture(f"Median and p99 TTFT against concurrency: {each}{drawn}", _png(fig))


def _gate(ax: Any, value: float | None, what: str, unit: str, style: str = "-.") -> str:
    """A horizontal line at the plan's VALUE, labelled WHAT; its words for the alt text."""
    if value is None:
        return ""
    ax.axhline(value, color="#b42318", linestyle=style, linewidth=1, label=f"{what} {value:g}")
    ax.set_ylim(top=max(ax.get_ylim()[1], value * 1.15))  # the line inside, with its label
    return f"; the plan's {what}: {value:g} {unit}"


def _concurrency_axes(ax: Any, x: list[int], ylabel: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, [str(c) for c in x])
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()


def plot_latency_throughput(levels: Sequence[LevelSummary], gates: Gates) -> Picture:
    """Median TPOT against output tokens/s, one labelled point per level: the curve
    `vllm bench serve` sweeps are read by (up and to the right: the engine saturates)."""
    fig, ax = _figure()
    x = [s.output_throughput for s in levels]
    y = [s.tpot.median_ms for s in levels]
    ax.plot(x, y, "o-")
    drawn = _gate(ax, gates.slo_tpot_ms, "TPOT SLO per request", "ms", ":")
    if drawn:
        ax.legend()
    for s, xi, yi in zip(levels, x, y, strict=True):
        ax.annotate(s.label, (xi, yi), textcoords="offset points", xytext=(5, 5))
    ax.set_xlabel("output tokens/s (all streams)")
    ax.set_ylabel("median time per output token (ms)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.margins(0.15)
    ax.grid(True, alpha=0.3)
    each = "; ".join(
        f"{s.label} {s.tpot.median_ms:.1f} ms at {s.output_throughput:.1f}" for s in levels
    )
    alt = f"Median TPOT against output tokens/s, one point per level: {each}{drawn}"
    return Picture(alt, _png(fig))


def plot_cdf(samples: Sequence[LevelSamples], field: str, name: str) -> Picture:
    """The cumulative distribution of one per-level sample (`ttft_ms`, `itl_ms`, which the
    report calls `name`), a line a level, on a log time axis (latencies under load span
    decades)."""
    fig, ax = _figure()
    each = []
    # a level without samples (all failed) has no line
    for level in samples:
        values = sorted(getattr(level, field))
        # zeros (two chunks in one read) count in the shares; a log axis cannot draw them
        points = [(v, (i + 1) / len(values)) for i, v in enumerate(values) if v > 0]
        if points:
            ax.step(*zip(*points, strict=True), where="post", label=level.label)
            middle, tail = percentile(values, 50), percentile(values, 99)
            each.append(f"{level.label} median {middle:.1f} ms, p99 {tail:.1f} ms")
    _log_x(ax)
    ax.set_xlabel(f"{name} (ms, log scale)")
    ax.set_ylabel("share of samples at or below")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend()
    return Picture(f"Cumulative distribution of {name} per level: {'; '.join(each)}", _png(fig))


def _log_x(ax: Any) -> None:
    """A log x axis labelled 40, 100, 200 rather than 4 x 10^1."""
    from matplotlib.ticker import LogFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def tokens_per_second(level: LevelSamples) -> list[float]:
    """Output tokens received in each whole second of the level, from its start."""
    if not level.output_tokens_at:
        return []
    bins = [0.0] * (math.floor(max(t for t, _ in level.output_tokens_at)) + 1)
    for t, tokens in level.output_tokens_at:
        bins[math.floor(t)] += tokens
    return bins


def plot_tokens_over_time(samples: Sequence[LevelSamples]) -> Picture:
    """Output tokens/s, binned per second, the levels one after another."""
    fig, ax = _figure()
    offset, each = 0, []
    for level in samples:
        bins = tokens_per_second(level)
        each.append(f"{level.label} {len(bins)} s, peak {max(bins, default=0):.0f} tok/s")
        seconds = [offset + i for i in range(len(bins) + 1)]
        ax.step(seconds, [*bins, bins[-1] if bins else 0], where="post", label=level.label)
        offset += len(bins)
        ax.axvline(offset, color="#999", linewidth=0.6)
    ax.set_xlabel("seconds, the levels one after another")
    ax.set_ylabel("output tokens/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    alt = f"Output tokens/s per second, the levels one after another: {'; '.join(each)}"
    return Picture(alt, _png(fig))


def plot_engine(engine: Sequence[EngineSample]) -> Picture:
    """The engine's /metrics over the load: KV-cache usage, running and waiting requests,
    and preemptions since the first scrape; the levels marked where each began."""
    fig, (kv, queue, preempted) = _figure(rows=3, height=6.0)
    t = [s.t_s for s in engine]
    kv.plot(t, [100 * s.values.get("kv_cache_usage", math.nan) for s in engine])
    kv.set_ylabel("KV cache used (%)")
    kv.set_ylim(0, 100)
    queue.plot(t, [s.values.get("running", math.nan) for s in engine], label="running")
    queue.plot(t, [s.values.get("waiting", math.nan) for s in engine], "--", label="waiting")
    queue.set_ylabel("requests")
    queue.legend()
    first = next((s.values["preemptions"] for s in engine if "preemptions" in s.values), 0.0)
    preempted.plot(t, [s.values.get("preemptions", math.nan) - first for s in engine])
    preempted.set_ylabel("preemptions since\nthe first scrape")
    preempted.set_xlabel("seconds since the load began")
    for ax in (kv, queue, preempted):
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    _mark_levels(kv, engine)
    return Picture(_engine_alt(engine, first), _png(fig))


def _engine_alt(engine: Sequence[EngineSample], first_preemptions: float) -> str:
    def most(figure: str) -> float:
        return max((s.values[figure] for s in engine if figure in s.values), default=0.0)

    return (
        f"The engine's /metrics over the load, {len(engine)} scrapes: KV cache used up to "
        f"{100 * most('kv_cache_usage'):.0f}%, up to {most('running'):.0f} running and "
        f"{most('waiting'):.0f} waiting requests, "
        f"{most('preemptions') - first_preemptions:.0f} preemptions"
    )


def _mark_levels(ax: Any, engine: Sequence[EngineSample]) -> None:
    """A line and the level's label where the scrapes first saw each level."""
    seen: set[str] = set()
    for s in engine:
        if s.level not in seen:
            seen.add(s.level)
            ax.axvline(s.t_s, color="#999", linewidth=0.6)
            ax.annotate(
                s.level,
                (s.t_s, 1),
                xycoords=("data", "axes fraction"),
                xytext=(2, -10),
                textcoords="offset points",
                fontsize=8,
            )
