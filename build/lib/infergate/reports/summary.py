"""The per-node summary a preflight prints at its end: what was found, node by node."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from infergate.checks import facts as read
from infergate.checks.gpu_health import health_summary
from infergate.checks.memory import gib
from infergate.checks.pressure import describe
from infergate.plan.model import Node

T = TypeVar("T")
COLUMNS = (
    *("node", "address", "driver", "CUDA", "image", "model", "usable mem", "fabric", "MTU"),
    *("swap, PSI", "GPU health", "firewall"),
)


def _or_unknown(reader: Callable[[read.Sections], T], sections: read.Sections) -> T | None:
    try:
        return reader(sections)
    except (read.ProbeError, ValueError):
        return None


def summary_row(node: Node, sections: read.Sections) -> dict[str, str]:
    """One node's line of the summary table, from its probe; what cannot be read shows `?`."""
    table = _or_unknown(read.smi_table_of, sections)
    driver, cuda = (table.driver or "?", table.cuda or "?") if table else ("-", "-")
    image = _or_unknown(read.image_id_of, sections)
    model = _or_unknown(read.model_of, sections)
    memory = _or_unknown(read.memory_of, sections)
    iface = (_or_unknown(read.interfaces_of, sections) or {}).get(node.fabric.interface)
    pressure = _or_unknown(read.pressure_of, sections)
    health = _or_unknown(read.gpu_health_of, sections)
    files = model.files if model else None
    return {
        "node": node.name,
        "address": node.address,
        "driver": driver,
        "CUDA": cuda,
        "image": image.removeprefix("sha256:")[:12] if image else "missing",
        "model": f"{len(files)} files, {gib(sum(f.size for f in files.values()))}"
        if files
        else "missing",
        "usable mem": gib(memory.usable) if memory else "?",
        "fabric": ", ".join(str(a) for a in iface.addresses) if iface else "missing",
        "MTU": str(iface.mtu) if iface else "?",
        "swap, PSI": describe(pressure) if pressure else "?",
        "GPU health": health_summary(health) if health is not None else "-",
        "firewall": read.firewall_of(sections).short(),
    }


def render_table(rows: list[dict[str, str]], verdicts: dict[str, str]) -> str:
    """A plain-text table, widest cell per column, the verdict last."""
    columns = [*COLUMNS, "verdict"]
    cells = [[*(row.get(c, "?") for c in COLUMNS), verdicts.get(row["node"], "?")] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [columns, *cells]
    )
