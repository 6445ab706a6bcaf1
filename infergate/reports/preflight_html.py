"""preflight.html, the preflight report for people: the checks as a grid, a row a check and
a column a node, the memory bars, the parity table, the model hash figures and the nodes.

It is self-contained (inline CSS, the memory bars as an SVG image in a data URI, no script,
no external URL) and has the inference report's look (page.py)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from infergate.checks.memory import GIB
from infergate.checks.model_hash import GB, MB
from infergate.reports.page import CSS, table
from infergate.reports.preflight import Cell, Matrix, NodeReport, Preflight

_MORE_CSS = """
.cell{display:block;padding:.2em .4em;font-size:.85em}.cell.passed{background:#dafbe1}
.cell.failed,.cell.error{background:#ffebe9;color:#82071e}.cell.skipped{background:#eef0f2}
.cell b{display:block}.cell div{white-space:pre-wrap;margin-top:.2em;color:#1d232a}
"""


def render_html(report: Preflight) -> str:
    m, e = report.meta, html.escape
    failed = sum(c.outcome in ("failed", "error") for n in report.nodes for c in n.checks)
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>infergate preflight: {e(m.inventory)}</title>"
        f"<style>{CSS}{_MORE_CSS}</style></head><body>",
        f"<h1>Preflight report: {e(m.inventory)}</h1>",
        f"<p class=meta>run {e(m.run_id)} &middot; {e(m.time)} &middot; infergate "
        f"{e(m.tool.version)} &middot; <span class={'fail' if failed else 'pass'}>"
        f"{failed} red cell(s)</span>",
        "<h2>Checks on each node</h2>",
        _grid(report.nodes),
        "<h2>Memory available against the plan's need</h2>",
        _memory_bars(report.nodes),
        _parity(report.parity, [n.node for n in report.nodes]),
        _model_hash(report.nodes),
        "<h2>Nodes</h2>",
        _summary(report.nodes),
        "</body></html>\n",
    ]
    return "\n".join(parts)


def _grid(nodes: Sequence[NodeReport]) -> str:
    """One row a check, one column a node; a red cell says what was found, planned, and
    the remedy (or the failure's text)."""
    checks = list(dict.fromkeys(c.check for n in nodes for c in n.checks))
    by_node = {n.node: {c.check: c for c in n.checks} for n in nodes}
    header = ["check", *(f"{n.node} ({n.address})" for n in nodes)]
    rows = []
    for check in checks:
        seen = [by_node[n.node].get(check) for n in nodes]
        rows.append([html.escape(check)] + [_cell(c) for c in seen])
    return table(header, rows, "text grid")


def _cell(cell: Cell | None) -> str:
    if cell is None:
        return "&ndash;"
    e = html.escape
    said = "".join(
        f"<div>found {e(p.found)}; planned {e(p.planned)}\nfix: <code>{e(p.remedy)}</code></div>"
        for p in cell.problems
    )
    if not said and cell.detail:
        said = f"<div>{e(cell.detail)}</div>"
    return f'<span class="cell {cell.outcome}"><b>{cell.outcome}</b>{said}</span>'


def _memory_bars(nodes: Sequence[NodeReport]) -> str:
    known = [n for n in nodes if n.memory is not None]
    if not known:
        return "<p>no node's memory was read</p>"
    encoded = base64.b64encode(memory_svg(known).encode()).decode("ascii")
    alt = "usable memory against the plan's need, per node"
    return f'<div class=plots><img src="data:image/svg+xml;base64,{encoded}" alt="{alt}"></div>'


def memory_svg(nodes: Sequence[NodeReport]) -> str:
    """A bar a node: MemTotal in grey, usable memory over it (green when it covers the
    plan's need, red when not), the need as a black line, and the figures under it."""
    top = max(max(n.memory.total / GIB, n.memory.needed_gib) for n in nodes if n.memory)
    width, left, row = 640, 150, 50
    scale = (width - left - 20) / top
    height = 10 + len(nodes) * row + 16
    shapes = [shape for i, n in enumerate(nodes) for shape in _bar(n, 10 + i * row, left, scale)]
    legend = (
        f'<text x="{left}" y="{height - 4}" fill="#56606b">grey: MemTotal; bar: usable; '
        "line: the plan's need (Inventory.mem_needed_gib)</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12" fill="#1d232a">{"".join(shapes)}{legend}</svg>'
    )


def _bar(n: NodeReport, y: int, left: int, scale: float) -> list[str]:
    """One node's shapes in memory_svg, its bar's top at Y."""
    assert n.memory is not None  # memory_svg is given the nodes whose memory was read
    m, bar = n.memory, 20
    need_x = left + m.needed_gib * scale
    colour = "#2da44e" if m.usable >= m.needed_gib * GIB else "#cf222e"
    return [
        f'<text x="{left - 8}" y="{y + 15}" text-anchor="end">{html.escape(n.node)}</text>',
        f'<rect x="{left}" y="{y}" width="{m.total / GIB * scale:.1f}" height="{bar}" '
        'fill="#e4e8ec"/>',
        f'<rect x="{left}" y="{y}" width="{m.usable / GIB * scale:.1f}" height="{bar}" '
        f'fill="{colour}"/>',
        f'<line x1="{need_x:.1f}" x2="{need_x:.1f}" y1="{y - 4}" y2="{y + bar + 4}" '
        'stroke="#1d232a" stroke-width="2"/>',
        f'<text x="{left}" y="{y + bar + 16}">{m.usable / GIB:.1f} GiB usable of '
        f"{m.total / GIB:.1f} GiB, {m.needed_gib:.1f} GiB needed</text>",
    ]


def _parity(matrix: Matrix, nodes: list[str]) -> str:
    if not matrix:
        return ""
    rows = []
    for attr, row in matrix.items():
        odd = len(set(row.values())) > 1
        values = [html.escape(row.get(n, "?")) for n in nodes]
        label = f"<span class=fail>{html.escape(attr)}</span>" if odd else html.escape(attr)
        rows.append([label, *values])
    return "<h2>Parity: the same on every node</h2>" + table(["", *nodes], rows, "text")


def _model_hash(nodes: Sequence[NodeReport]) -> str:
    """A row a node whose model was hashed: what it read, how fast, what the cache spared."""
    header = ["node", "files", "hashed", "from the cache", "GB read", "seconds", "MB/s"]
    rows = [_model_hash_row(n) for n in nodes if n.model_hash is not None]
    return "<h2>Model hash on each node</h2>" + table(header, rows) if rows else ""


def _model_hash_row(n: NodeReport) -> list[str]:
    h = n.model_hash
    assert h is not None  # _model_hash gives the nodes whose model was hashed
    rate = f"{h.hashed_bytes / MB / h.seconds:.0f}" if h.seconds else "&ndash;"
    figures = [str(h.files), str(h.hashed), str(h.cache_hits), f"{h.hashed_bytes / GB:.2f}"]
    return [html.escape(n.node), *figures, f"{h.seconds:.1f}", rate]


def _summary(nodes: Sequence[NodeReport]) -> str:
    keys = list(dict.fromkeys(k for n in nodes for k in n.summary)) or ["node", "address"]
    rows = [[html.escape(str(_facts(n).get(k, "?"))) for k in keys] for n in nodes]
    return table(keys, rows, "text")


def _facts(n: NodeReport) -> dict[str, str]:
    return {"node": n.node, "address": n.address, **n.summary}
