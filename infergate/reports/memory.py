"""The memory guard's curves in the reports: per node, MemAvailable (bounded by its memory
cgroup) and PSI some/full avg10 over the run; a plot per node where matplotlib is present,
else a table of every tenth sample (docs/memory-guard.md).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from infergate.reports import plots
from infergate.reports.memory_curve import MemoryCurve
from infergate.reports.page import table

TABLE_EVERY = 10  # a table row per this many samples


def memory_section(curves: Sequence[MemoryCurve]) -> str:
    """report.html's memory section: a plot per node, or tables without matplotlib."""
    if not curves:
        return ""
    head = "<h2>Memory during the launch and the load</h2>"
    if plots.available():
        images = "".join(_img(plot_memory(c)) for c in curves)
        return f"{head}<div class=plots>{images}</div>"
    return head + "".join(_table(c) for c in curves)


def _img(p: plots.Picture) -> str:
    return f'<img src="data:image/png;base64,{p.png}" alt="{html.escape(p.alt, quote=True)}">'


def _table(c: MemoryCurve) -> str:
    rows = [
        [f"{t:.0f}", f"{a:.2f}", _pct(s), _pct(f)]
        for t, a, s, f in list(zip(c.t_s, c.available_gib, c.psi_some, c.psi_full, strict=True))[
            ::TABLE_EVERY
        ]
    ]
    header = ["s", "available GiB", "PSI some %", "PSI full %"]
    return f"<h3>{html.escape(c.where)}</h3>" + table(header, rows)


def _pct(value: float | None) -> str:
    return "&ndash;" if value is None else f"{value:.1f}"


def plot_memory(c: MemoryCurve) -> plots.Picture:
    """MemAvailable over the run, with the floor; PSI some and full below it."""
    fig, (mem, psi) = plots._figure(rows=2, height=4.2)
    mem.plot(c.t_s, c.available_gib, "-", label="available")
    style = "-." if c.enforced else ":"
    mem.axhline(c.floor_gib, color="red", linestyle=style, label=f"floor {c.floor_gib:g} GiB")
    mem.set_ylabel("GiB")
    mem.set_title(c.where, fontsize=9)
    mem.legend(fontsize=7)
    for values, name in ((c.psi_some, "some"), (c.psi_full, "full")):
        psi.plot(c.t_s, [v if v is not None else float("nan") for v in values], label=name)
    psi.set_ylabel("PSI avg10 %")
    psi.set_xlabel("seconds")
    psi.legend(fontsize=7)
    low = f"{c.lowest_gib:.2f}" if c.lowest_gib is not None else "none"
    acted = "enforced" if c.enforced else "recorded only"
    alt = (
        f"Memory available on {c.where} over {len(c.t_s)} samples: lowest {low} GiB, "
        f"floor {c.floor_gib:g} GiB ({acted}), with PSI some and full avg10"
    )
    return plots.Picture(alt, plots._png(fig))
