"""preflight.html, the preflight report for people: the verdict first (verdict.py's: READY or
NOT READY, each cause by node with its code and fix), then a matrix of nodes by the
catalogue's groups of checks, each cell linking to that group's details on the node further
down; the memory bars, the parity table (value and the nodes that have it), the model hash
figures and the nodes. No table is wider than the page (selftest/unit/test_report_width.py).

It is self-contained (inline CSS, the memory bars as an SVG image in a data URI, no script,
no external URL) and has the inference report's look (page.py)."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence

from infergate.catalogue import CHECKS, entry
from infergate.checks.memory import GIB
from infergate.checks.model_hash import GB, MB
from infergate.reports.page import CSS, table
from infergate.reports.preflight import Cell, Matrix, NodeReport, Preflight
from infergate.reports.verdict import by_where, headline

STATES = ("failed", "blocked", "warned", "passed", "n/a")  # a group shows its first found
GROUPS = tuple(dict.fromkeys(e.group for e in CHECKS.values()))
_MORE_CSS = """
table.matrix{table-layout:fixed;width:100%;font-size:.8em}table.matrix td,table.matrix th{
padding:.2em .3em;text-align:center}table.matrix td:first-child,table.matrix th:first-child{
width:9em;text-align:left}.st{display:block;text-decoration:none;color:inherit}
.failed{background:#ffebe9;color:#82071e}.blocked{background:#fff1cc;color:#6b4f00}
.warned{background:#fff8c5}.passed{background:#dafbe1}.na{color:#8c959f}
.verdict{font-size:1.2em;margin:.6em 0}.cause{margin:.2em 0 .2em 1.2em}
.item{margin:.15em 0}.item code{white-space:pre-wrap}
"""


def render_html(report: Preflight) -> str:
    m, e = report.meta, html.escape
    names = [n.node for n in report.nodes]
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>infergate preflight: {e(m.inventory)}</title>"
        f"<style>{CSS}{_MORE_CSS}</style></head><body>",
        f"<h1>Preflight report: {e(m.inventory)}</h1>",
        f"<p class=meta>run {e(m.run_id)} &middot; {e(m.time)} &middot; infergate "
        f"{e(m.tool.version)}",
        _verdict(report),
        "<h2>Each group of checks on each node</h2>",
        _matrix(report.nodes),
        _not_applicable(report.nodes, report.requirements),
        "<h2>Memory available against the plan's need</h2>",
        _memory_bars(report.nodes),
        _parity(report.parity, names),
        _model_hash(report.nodes),
        "<h2>Nodes</h2>",
        _summary(report.nodes),
        "<h2>Details on each node</h2>",
        *(
            _details(i, n, _groups(report.nodes), report.requirements)
            for i, n in enumerate(report.nodes)
        ),
        "</body></html>\n",
    ]
    return "\n".join(parts)


def _verdict(report: Preflight) -> str:
    """verdict.py's block: the headline, then each cause by where, with its code and fix."""
    causes = list(report.causes)
    ready = not any(not c.warn for c in causes)
    e, out = html.escape, []
    out.append(f"<p class='verdict {'pass' if ready else 'fail'}'>")
    out.append(e(headline(causes, report.not_run)) + "</p>")
    for where, listed in by_where(causes):
        out.append(f"<div><b>{e(where)}</b>")
        for c in listed:
            kind = "warn " if c.warn else ("root " if c.root else "")
            fix = f"<br>fix: <code>{e(c.remedy)}</code>" if c.remedy else ""
            out.append(
                f"<div class=cause>{kind}<b>{e(c.code or '(no code)')}</b> {e(c.said)}{fix}</div>"
            )
        out.append("</div>")
    return "".join(out)


def state(cell: Cell) -> str:
    """One of STATES for CELL: a failure or error, a skip for a root, a skip that does not
    apply, problems of a warn-severity check that passed, or a pass."""
    if cell.outcome in ("failed", "error"):
        return "failed"
    if cell.blocked:
        return "blocked"
    if cell.outcome == "skipped":
        return "n/a"
    return "warned" if cell.problems else "passed"


def group_of(cell: Cell) -> str:
    found = entry(cell.check.rpartition("::")[2])
    return found.group if found else "other"


def _groups(nodes: Sequence[NodeReport]) -> list[str]:
    present = {group_of(c) for n in nodes for c in n.checks}
    return [g for g in (*GROUPS, "other") if g in present]


def _group_state(cells: Sequence[Cell]) -> str:
    states = {state(c) for c in cells}
    return next((s for s in STATES if s in states), "")


def _matrix(nodes: Sequence[NodeReport]) -> str:
    """A row a node, a column a group; each cell the group's state there, linking to its
    details below."""
    groups = _groups(nodes)
    rows = []
    for i, n in enumerate(nodes):
        cells = [html.escape(n.node)]
        for j, g in enumerate(groups):
            st = _group_state([c for c in n.checks if group_of(c) == g])
            link = f'<a class="st {_css(st)}" href="#n{i}-g{j}">{st}</a>' if st else "&ndash;"
            cells.append(link)
        rows.append(cells)
    return table(["node", *groups], rows, "matrix")


def _not_applicable(nodes: Sequence[NodeReport], words: Mapping[str, str]) -> str:
    """The checks that did not apply, folded into one line: each once, with its reason."""
    seen: dict[str, str] = {}
    for c in (c for n in nodes for c in n.checks if state(c) == "n/a"):
        seen.setdefault(_said(words, c.check), c.detail)
    if not seen:
        return ""
    said = "; ".join(f"{html.escape(r)} ({html.escape(why)})" for r, why in seen.items())
    return f"<p class=meta>Not applicable: {said}</p>"


def _details(i: int, n: NodeReport, groups: Sequence[str], words: Mapping[str, str]) -> str:
    """Node N's groups (GROUPS: the matrix's columns), each row anchored for the matrix: what
    failed, was blocked or warned, with what was found, planned and the fix; passes counted."""
    rows = []
    for j, g in enumerate(groups):
        cells = [c for c in n.checks if group_of(c) == g]
        if cells:
            st = _group_state(cells)
            label = f'<span id="n{i}-g{j}">{html.escape(g)}</span>'
            rows.append([label, f'<span class="st {_css(st)}">{st}</span>', _items(cells, words)])
    head = f"<h3 id=n{i}>{html.escape(n.node)} ({html.escape(n.address)})</h3>"
    return head + table(["group", "state", "checks"], rows, "text")


def _items(cells: Sequence[Cell], words: Mapping[str, str]) -> str:
    """Each check that did not pass, by its requirement, with what it said; the passes and
    the checks that did not apply counted."""
    out = [_item(c, words) for c in cells if state(c) not in ("passed", "n/a")]
    passed = sum(state(c) == "passed" for c in cells)
    skipped = sum(state(c) == "n/a" for c in cells)
    counts = [f"{passed} passed"] if passed else []
    counts += [f"{skipped} not applicable"] if skipped else []
    if counts:
        out.append(f"<div class=item>{', '.join(counts)}</div>")
    return "".join(out)


def _item(c: Cell, words: Mapping[str, str]) -> str:
    """A check that did not pass: its state, code and requirement, then what it said."""
    e, name = html.escape, c.check.rpartition("::")[2]
    said = "".join(
        f"<br>found {e(p.found)}; planned {e(p.planned)}<br>fix: <code>{e(p.remedy)}</code>"
        for p in c.problems
    )
    said = said or (f"<br>{e(c.detail)}" if c.detail else "")
    found = entry(name)
    code = f"{found.code} " if found else ""
    return f"<div class=item>{state(c)}: {code}{e(_said(words, c.check))}{said}</div>"


def _said(words: Mapping[str, str], check: str) -> str:
    """CHECK's requirement in words (catalogue_doc.requirement, kept in the report)."""
    name = check.rpartition("::")[2]
    return words.get(name, name)


def _css(st: str) -> str:
    return "na" if st == "n/a" else st


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
    """A row an attribute and value, with the nodes that have it; a differing attribute red."""
    if not matrix:
        return ""
    rows, e = [], html.escape
    for attr, row in matrix.items():
        values = {n: row.get(n, "?") for n in nodes}
        odd = len(set(values.values())) > 1
        label = f"<span class=fail>{e(attr)}</span>" if odd else e(attr)
        for value in dict.fromkeys(values.values()):
            have = [n for n in nodes if values[n] == value]
            who = f"every node ({len(have)})" if not odd else ", ".join(have)
            rows.append([label, e(value), e(who)])
    header = ["attribute", "value", "nodes"]
    return "<h2>Parity: the same on every node</h2>" + table(header, rows, "text")


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
