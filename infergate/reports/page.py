"""The look the reports share (the inference report and the preflight report): one
stylesheet, inline, and tables whose numbers align."""

from __future__ import annotations

import html
from collections.abc import Sequence

CSS = """
body{font:15px/1.45 system-ui,sans-serif;color:#1d232a;max-width:1100px;margin:2em auto;
padding:0 1em}h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.8em;
border-bottom:1px solid #d8dde3;padding-bottom:.2em}.meta{color:#56606b}
table{border-collapse:collapse;margin:.6em 0;font-variant-numeric:tabular-nums}
th,td{padding:.3em .7em;border-bottom:1px solid #e4e8ec;text-align:right}
th{background:#f3f5f7;font-weight:600}td:first-child,th:first-child{text-align:left}
.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}.skip{color:#8a6d00}
table.text td,table.text th,table.checks td,table.checks th{text-align:left;vertical-align:top}
table.checks td:last-child{white-space:pre-wrap;font-size:.85em;color:#444}
td,.cause{overflow-wrap:anywhere}th{overflow-wrap:break-word}
table:not(.text):not(.checks) td{overflow-wrap:normal;white-space:nowrap}
.plots{display:flex;flex-wrap:wrap;gap:1em}.plots img{max-width:100%;border:1px solid #e4e8ec}
"""


def row(cells: Sequence[str], tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], kind: str = "") -> str:
    """A table: numbers right-aligned, or (kind "text", "checks") every column left-aligned;
    a checks table shows its last column (a failure or a skip's reason) as small text."""
    head = row([html.escape(h) for h in header], "th")
    opening = f'<table class="{kind}">' if kind else "<table>"
    return opening + head + "".join(row(r) for r in rows) + "</table>"
