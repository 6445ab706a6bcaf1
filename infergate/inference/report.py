"""The inference phase's results: results.json for machines, a self-contained report.html
for people (inline CSS, plots as base64 PNG, no script, no external URL).

results.json reads:

    {"meta": {"inventory": "two-sparks", "endpoint": "http://192.168.1.10:8000/v1",
              "model": "qwen3.5-122b", "time": "2026-12-01T10:00:00+00:00"},
     "levels": [{"concurrency": 1, "completed": 16, "ttft": {"median_ms": 38.0, ...}, ...}],
     "conformance": [{"name": "chat streaming with usage", "status": "passed", "detail": ""}],
     "nodes": [{"node": "spark1", "gpu": "NVIDIA GB10", "driver": "580.95.05"}],
     "evidence": [{"label": "engine log spark1", "path": "evidence/spark1-engine.log"}]}
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from infergate.inference import plots
from infergate.inference.metrics import (
    Distribution,
    LevelSummary,
    summary_from_dict,
    summary_to_dict,
)
from infergate.inference.samples import EngineSample, LevelSamples
from infergate.secrets import private_dir, write_private


@dataclass(frozen=True)
class ReportMeta:
    inventory: str
    endpoint: str
    model: str
    time: str  # ISO 8601


@dataclass(frozen=True)
class Outcome:
    """One conformance check's result, as the test that made it reports it."""

    name: str
    status: str  # passed | failed | skipped, as pytest says
    detail: str = ""  # the failure, or the reason for the skip


@dataclass(frozen=True)
class Evidence:
    label: str
    path: str  # relative to the report's directory

    def __post_init__(self) -> None:
        if self.path.startswith("/") or "://" in self.path:  # the report must move as a folder
            raise ValueError(f"evidence path {self.path!r} is not relative to the report")


@dataclass(frozen=True)
class Results:
    meta: ReportMeta
    levels: tuple[LevelSummary, ...]
    conformance: tuple[Outcome, ...] = ()
    nodes: tuple[Mapping[str, object], ...] = ()  # per-node facts, one mapping a node
    evidence: tuple[Evidence, ...] = ()
    samples: tuple[LevelSamples, ...] = ()  # for the pictures; not in results.json
    engine: tuple[EngineSample, ...] = ()  # the engine's /metrics over the load


def write_report(out_dir: Path, results: Results) -> tuple[Path, Path]:
    """Write results.json and report.html into out_dir, for this user alone (0700, 0600);
    return their paths."""
    private_dir(out_dir)
    json_path, html_path = out_dir / "results.json", out_dir / "report.html"
    write_private(json_path, json.dumps(_to_json(results), indent=2) + "\n")
    write_private(html_path, render_html(results))
    return json_path, html_path


def read_results(path: Path) -> Results:
    """results.json back into Results (the inverse of write_report's JSON)."""
    data: dict[str, Any] = json.loads(path.read_text())
    return Results(
        meta=ReportMeta(**data["meta"]),
        levels=tuple(summary_from_dict(level) for level in data["levels"]),
        conformance=tuple(Outcome(**o) for o in data["conformance"]),
        nodes=tuple(data["nodes"]),
        evidence=tuple(Evidence(**e) for e in data["evidence"]),
    )


def _to_json(results: Results) -> dict[str, object]:
    return {
        "meta": asdict(results.meta),
        "levels": [summary_to_dict(level) for level in results.levels],
        "conformance": [asdict(o) for o in results.conformance],
        "nodes": [dict(n) for n in results.nodes],
        "evidence": [asdict(e) for e in results.evidence],
    }


# --- HTML --------------------------------------------------------------------------------

_CSS = """
body{font:15px/1.45 system-ui,sans-serif;color:#1d232a;max-width:1100px;margin:2em auto;
padding:0 1em}h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.8em;
border-bottom:1px solid #d8dde3;padding-bottom:.2em}.meta{color:#56606b}
table{border-collapse:collapse;margin:.6em 0;font-variant-numeric:tabular-nums}
th,td{padding:.3em .7em;border-bottom:1px solid #e4e8ec;text-align:right}
th{background:#f3f5f7;font-weight:600}td:first-child,th:first-child{text-align:left}
.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}.skip{color:#8a6d00}
table.text td,table.text th,table.checks td,table.checks th{text-align:left;vertical-align:top}
table.checks td:last-child{white-space:pre-wrap;font-size:.85em;color:#444}
.plots{display:flex;flex-wrap:wrap;gap:1em}.plots img{max-width:100%;border:1px solid #e4e8ec}
"""


def render_html(results: Results) -> str:
    m, e = results.meta, html.escape
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>infergate inference: {e(m.inventory)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Inference report: {e(m.inventory)}</h1>",
        f"<p class=meta>endpoint {e(m.endpoint)} &middot; model {e(m.model)} &middot; {e(m.time)}",
        "<h2>Tokens/s and latency per concurrency level</h2>",
        _levels_table(results.levels),
        *_pictures(results),
        _conformance(results.conformance),
        _nodes(results.nodes),
    ]
    parts += [_evidence(results.evidence), "</body></html>\n"]
    return "\n".join(parts)


def _pictures(results: Results) -> list[str]:
    """The plots, each section with its pictures or a sentence saying why it has none."""
    levels, samples, engine = results.levels, results.samples, results.engine
    return [
        _per_level(levels),
        "<h2>Latency distributions</h2>",
        _distributions(samples),
        "<h2>Output tokens over time</h2>",
        _plots([plots.plot_tokens_over_time(samples)])
        if any(level.output_tokens_at for level in samples)
        else "<p>No plot: the run kept no output tokens over time.",
        "<h2>The engine's own /metrics during the load</h2>",
        _plots([plots.plot_engine(engine)]) if engine else
        "<p>No plot: the engine served no /metrics with vLLM's or SGLang's load figures "
        "while the load ran (or they were not scraped).",
    ]  # fmt: skip


def _per_level(levels: Sequence[LevelSummary]) -> str:
    if not levels:
        return "<p>No plots: no level of the load was measured."
    return _plots([plots.plot_throughput(levels), plots.plot_ttft(levels),
                   plots.plot_latency_throughput(levels)])  # fmt: skip


def _distributions(samples: Sequence[LevelSamples]) -> str:
    pictures = [plots.plot_cdf(samples, field, name)
                for field, name in (("ttft_ms", "TTFT"), ("itl_ms", "ITL"))
                if any(max(getattr(level, field), default=0) > 0 for level in samples)]  # fmt: skip
    if not pictures:
        return "<p>No distributions: the run kept no TTFT or ITL samples."
    return _plots(pictures)


def _plots(pictures: Sequence[plots.Picture]) -> str:
    images = "".join(
        f'<img src="data:image/png;base64,{p.png}" alt="{html.escape(p.alt, quote=True)}">'
        for p in pictures
    )
    return f"<div class=plots>{images}</div>"


def _row(cells: Sequence[str], tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], kind: str = "") -> str:
    """A table: numbers right-aligned, or (kind "text", "checks") every column left-aligned;
    a checks table shows its last column (a failure or a skip's reason) as small text."""
    head = _row([html.escape(h) for h in header], "th")
    opening = f'<table class="{kind}">' if kind else "<table>"
    return opening + head + "".join(_row(r) for r in rows) + "</table>"


def _ms(d: Distribution) -> list[str]:
    return [f"{d.median_ms:.1f}", f"{d.p99_ms:.1f}"] if d.count else ["&ndash;", "&ndash;"]


def _levels_table(levels: Sequence[LevelSummary]) -> str:
    header = [
        "concurrency", "TTFT median ms", "TTFT p99 ms", "TPOT median ms", "TPOT p99 ms",
        "ITL median ms", "ITL p99 ms", "output tok/s", "tok/s per stream", "completed", "failed",
    ]  # fmt: skip
    return _table(header, [_level_row(s) for s in levels])


def _level_row(s: LevelSummary) -> list[str]:
    failed = f"<span class={'fail' if s.failed else 'pass'}>{s.failed}</span>"
    throughput = [f"{s.output_throughput:.1f}", f"{s.per_stream_tok_s:.1f}"]
    return [str(s.concurrency), *_ms(s.ttft), *_ms(s.tpot), *_ms(s.itl), *throughput,
            str(s.completed), failed]  # fmt: skip


_STATUS_CLASS = {"passed": "pass", "skipped": "skip", "failed": "fail"}


def _conformance(outcomes: Sequence[Outcome]) -> str:
    if not outcomes:
        return ""
    rows = [
        [
            html.escape(o.name),
            f"<span class={_STATUS_CLASS.get(o.status, 'fail')}>{o.status}</span>",
            html.escape(o.detail),
        ]
        for o in outcomes
    ]
    return "<h2>Checks</h2>" + _table(["check", "result", "detail"], rows, "checks")


def _nodes(nodes: Sequence[Mapping[str, object]]) -> str:
    if not nodes:
        return ""
    keys = list(dict.fromkeys(k for n in nodes for k in n))
    rows = [[html.escape(str(n.get(k, ""))) for k in keys] for n in nodes]
    return "<h2>Nodes</h2>" + _table(keys, rows, "text")


def _evidence(evidence: Sequence[Evidence]) -> str:
    if not evidence:
        return ""
    items = "".join(
        f'<li><a href="{html.escape(e.path, quote=True)}">{html.escape(e.label)}</a> '
        f"<code>{html.escape(e.path)}</code></li>"
        for e in evidence
    )
    return f"<h2>Evidence</h2><ul>{items}</ul>"
