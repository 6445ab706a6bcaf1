"""The GPUs' telemetry in report.html: a table of each GPU's figures over the launch and the
load, and per node a plot of utilization, SM clock and power where matplotlib is present."""

from __future__ import annotations

import html
from collections.abc import Sequence
from itertools import groupby

from infergate.reports import plots
from infergate.reports.gpu_curve import GpuCurve
from infergate.reports.page import table

_HEADER = (
    *("GPU", "rows", "mean utilization %", "SM MHz at work (lowest)", "SM MHz at work (median)"),
    *("max W", "max °C", "max memory MiB", "clock event reasons"),
)


def gpu_section(curves: Sequence[GpuCurve]) -> str:
    """report.html's GPU section; none where no GPU was sampled (no guard, or no nvidia-smi)."""
    if not curves:
        return ""
    head = "<h2>GPUs during the launch and the load</h2>"
    rows = [_row(c) for c in curves]
    pictures = ""
    if plots.available():
        nodes = [list(c) for _, c in groupby(curves, key=lambda c: c.where)]
        pictures = "<div class=plots>" + "".join(_img(plot_gpus(n)) for n in nodes) + "</div>"
    return head + table(_HEADER, rows) + pictures


def _row(c: GpuCurve) -> list[str]:
    f = c.figures()
    cells = [f.rows, f.mean_utilization_pct, f.min_busy_sm_mhz, f.median_busy_sm_mhz]
    cells += [f.max_power_w, f.max_temperature_c, f.max_memory_used_mib]
    shown = ["&ndash;" if v is None else str(v) for v in cells]
    return [html.escape(c.label), *shown, ", ".join(f.clock_event_reasons) or "none"]


def _img(p: plots.Picture) -> str:
    return f'<img src="data:image/png;base64,{p.png}" alt="{html.escape(p.alt, quote=True)}">'


def plot_gpus(curves: Sequence[GpuCurve]) -> plots.Picture:
    """One node's GPUs: utilization, SM clock and power over the run, a line per GPU."""
    fig, axes = plots._figure(rows=3, height=5.0)
    for c in curves:
        for ax, values in zip(axes, (c.utilization_pct, c.sm_mhz, c.power_w), strict=True):
            ax.plot(c.t_s, [v if v is not None else float("nan") for v in values], label=c.index)
    for ax, name in zip(axes, ("utilization %", "SM MHz", "power W"), strict=True):
        ax.set_ylabel(name, fontsize=8)
    axes[0].set_title(curves[0].where, fontsize=9)
    axes[0].legend(title="GPU", fontsize=7)
    axes[-1].set_xlabel("seconds")
    figures = [c.figures() for c in curves]
    low = [f.min_busy_sm_mhz for f in figures if f.min_busy_sm_mhz is not None]
    each = "; ".join(
        f"GPU {c.index} mean utilization {f.mean_utilization_pct} %, max power {f.max_power_w} W"
        for c, f in zip(curves, figures, strict=True)
    )
    at_work = f"; lowest SM clock at work {min(low)} MHz" if low else ""
    alt = f"GPUs of {curves[0].where} over {len(curves[0].t_s)} rows: {each}{at_work}"
    return plots.Picture(alt, plots._png(fig))
