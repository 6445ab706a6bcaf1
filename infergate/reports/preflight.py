"""The preflight's report: preflight.json for machines, a self-contained preflight.html for
people (inline CSS, the memory bars as an SVG image in a data URI, no script, no external
URL), the same look as the inference report.

preflight.json reads:

    {"schema_version": 2,
     "meta": {"inventory": "lab", "time": "2026-12-01T10:00:00+0000", "run_id": "...",
              "tool": {"name": "infergate", "version": "0.1.0", "commit": "0163503..."}},
     "nodes": [{"node": "node1", "address": "10.251.0.11",
                "summary": {"driver": "580.95.05", "usable mem": "22.6 GiB", ...},
                "memory": {"total": 33554432000, "available": ..., "usable": ...,
                           "needed_gib": 1.5},
                "model_hash": {"files": 7, "hashed": 2, "hashed_bytes": 1073741824,
                               "seconds": 3.2, "cache_hits": 5},
                "checks": [{"check": "test_memory.py::test_memory_available_for_plan",
                            "outcome": "failed", "cluster": false, "detail": "",
                            "problems": [{"found": "...", "planned": "...", "remedy": "..."}]}]}],
     "parity": {"kernel": {"node1": "6.1.0", "node2": "6.1.0"}, ...}}

"model_hash" is what the model's SHA-256 check (checks.model_hash) did on the node: files
in the model, files hashed this time, the bytes it read for them, its seconds, and the files
whose digest came from the node's cache; null where that check did not run (schema 2 added
it).

A check about the nodes together (a parity or balance test) has a cell on every node:
failed where its problems name the node, or on every node when they name none.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from infergate.checks.memory import GIB
from infergate.checks.model_hash import GB, MB, ModelHashes
from infergate.plan.secrets import private_dir, write_private
from infergate.problems import Problem
from infergate.reports.page import CSS, table
from infergate.reports.version import ToolVersion, tool_version

SCHEMA_VERSION = 2  # 2: each node's model_hash
OUTCOMES = ("passed", "failed", "skipped", "error")
Matrix = dict[str, dict[str, str]]  # attribute -> node -> value, as checks.parity has it


@dataclass(frozen=True)
class Cell:
    """One check's result on one node."""

    check: str  # the test: its file and function, test_memory.py::test_memory_available_...
    outcome: str  # one of OUTCOMES
    problems: tuple[Problem, ...] = ()
    detail: str = (
        ""  # the failure's text (the page shows it where no Problem says it), or why it skipped
    )
    cluster: bool = False  # a check of the nodes together


@dataclass(frozen=True)
class Memory:
    total: int  # bytes, MemTotal
    available: int  # bytes, MemAvailable
    usable: int  # bytes: MemAvailable, or less under a cgroup limit
    needed_gib: float  # Inventory.mem_needed_gib


@dataclass(frozen=True)
class ModelHash:
    """What hashing the model took on one node (checks.model_hash.ModelHashes' figures)."""

    files: int  # files in the model directory
    hashed: int  # files hashed this time
    hashed_bytes: int  # bytes read to hash them
    seconds: float
    cache_hits: int  # files whose digest came from the node's cache, unchanged

    @classmethod
    def of(cls, hashes: ModelHashes) -> ModelHash:
        return cls(len(hashes.sha256), hashes.hashed, hashes.hashed_bytes, hashes.seconds,
                   hashes.cache_hits)  # fmt: skip


@dataclass(frozen=True)
class NodeReport:
    node: str
    address: str
    summary: Mapping[str, str] = field(default_factory=dict)  # checks.summary.summary_row
    memory: Memory | None = None
    checks: tuple[Cell, ...] = ()
    model_hash: ModelHash | None = None


@dataclass(frozen=True)
class Meta:
    inventory: str
    time: str  # ISO 8601
    run_id: str
    tool: ToolVersion = field(default_factory=tool_version)


@dataclass(frozen=True)
class Preflight:
    meta: Meta
    nodes: tuple[NodeReport, ...]
    parity: Matrix = field(default_factory=dict)


@dataclass(frozen=True)
class CheckSeen:
    """What the reports of one test said, before it is spread over the nodes."""

    check: str
    node: str | None  # None: a check of the nodes together
    outcome: str
    problems: Mapping[str, tuple[Problem, ...]] = field(default_factory=dict)  # node -> ...
    detail: str = ""


def cells(test: CheckSeen, nodes: Sequence[str]) -> dict[str, Cell]:
    """TEST's cell on each node it is about: its own node, or for a check of the nodes
    together every node, failed where its problems name the node (all when they name none)."""
    if test.node is not None:
        return {test.node: Cell(test.check, test.outcome, test.problems.get(test.node, ()),
                                test.detail)}  # fmt: skip
    named = test.outcome == "failed" and bool(test.problems)
    found = {}
    for node in nodes:
        outcome = "passed" if named and node not in test.problems else test.outcome
        detail = "" if outcome == "passed" else test.detail
        found[node] = Cell(test.check, outcome, test.problems.get(node, ()), detail, True)
    return found


# --- JSON ---------------------------------------------------------------------------------


def write_preflight(out_dir: Path, report: Preflight) -> tuple[Path, Path]:
    """Write preflight.json and preflight.html into OUT_DIR, for this user alone (0700,
    0600); return their paths."""
    private_dir(out_dir)
    json_path, html_path = out_dir / "preflight.json", out_dir / "preflight.html"
    write_private(json_path, json.dumps(to_json(report), indent=2) + "\n")
    write_private(html_path, render_html(report))
    return json_path, html_path


def to_json(report: Preflight) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, **asdict(report)}


def read_preflight(path: Path) -> Preflight:
    """preflight.json back into a Preflight (the inverse of write_preflight's JSON); a file
    of another schema version is refused, naming both."""
    data: dict[str, Any] = json.loads(path.read_text())
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {data.get('schema_version')!r}, this "
                         f"infergate reads {SCHEMA_VERSION}")  # fmt: skip
    meta = Meta(**{**data["meta"], "tool": ToolVersion(**data["meta"]["tool"])})
    return Preflight(meta, tuple(_node(n) for n in data["nodes"]), data["parity"])


def _node(data: dict[str, Any]) -> NodeReport:
    memory = Memory(**data["memory"]) if data["memory"] else None
    checks = tuple(
        Cell(**{**c, "problems": tuple(Problem(**p) for p in c["problems"])})
        for c in data["checks"]
    )
    model_hash = ModelHash(**data["model_hash"]) if data["model_hash"] else None
    return NodeReport(data["node"], data["address"], data["summary"], memory, checks, model_hash)


# --- HTML ---------------------------------------------------------------------------------

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
    svg = memory_svg(known)
    encoded = base64.b64encode(svg.encode()).decode("ascii")
    return (f'<div class=plots><img src="data:image/svg+xml;base64,{encoded}" '
            f'alt="usable memory against the plan\'s need, per node"></div>')  # fmt: skip


def memory_svg(nodes: Sequence[NodeReport]) -> str:
    """A bar a node: MemTotal in grey, usable memory over it (green when it covers the
    plan's need, red when not), the need as a black line, and the figures under it."""
    top = max(max(n.memory.total / GIB, n.memory.needed_gib) for n in nodes if n.memory)
    width, left, bar, row = 640, 150, 20, 50
    scale = (width - left - 20) / top
    height = 10 + len(nodes) * row + 16
    shapes = []
    for i, n in enumerate(nodes):
        assert n.memory is not None  # memory_svg is given the nodes whose memory was read
        m, y = n.memory, 10 + i * row
        need_x = left + m.needed_gib * scale
        colour = "#2da44e" if m.usable >= m.needed_gib * GIB else "#cf222e"
        shapes += [
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
    legend = (f'<text x="{left}" y="{height - 4}" fill="#56606b">grey: MemTotal; bar: usable; '
              "line: the plan's need (Inventory.mem_needed_gib)</text>")  # fmt: skip
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12" fill="#1d232a">{"".join(shapes)}{legend}</svg>'
    )


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
    known = [n for n in nodes if n.model_hash is not None]
    if not known:
        return ""
    header = ["node", "files", "hashed", "from the cache", "GB read", "seconds", "MB/s"]
    rows = []
    for n in known:
        h = n.model_hash
        assert h is not None  # known holds the nodes whose model was hashed
        rate = f"{h.hashed_bytes / MB / h.seconds:.0f}" if h.seconds else "&ndash;"
        rows.append([html.escape(n.node), str(h.files), str(h.hashed), str(h.cache_hits),
                     f"{h.hashed_bytes / GB:.2f}", f"{h.seconds:.1f}", rate])  # fmt: skip
    return "<h2>Model hash on each node</h2>" + table(header, rows)


def _summary(nodes: Sequence[NodeReport]) -> str:
    keys = list(dict.fromkeys(k for n in nodes for k in n.summary)) or ["node", "address"]
    rows = [
        [html.escape(str({"node": n.node, "address": n.address, **n.summary}.get(k, "?")))
         for k in keys]
        for n in nodes
    ]  # fmt: skip
    return table(keys, rows, "text")
