"""The inference phase's results: results.json for machines, a self-contained report.html
for people (inline CSS, plots as base64 PNG, no script, no external URL).

results.json reads (outputs.SCHEMA_VERSION says which shape; results.csv holds the same
levels, one row each):

    {"schema_version": 2,
     "tool": {"name": "infergate", "version": "0.1.0", "commit": "cba665a1..."},
     "meta": {"inventory": "two-sparks", "endpoint": "http://192.168.1.10:8000/v1",
              "model": "qwen3.5-122b", "time": "2026-12-01T10:00:00+00:00"},
     "levels": [{"concurrency": 1, "request_rate": null, "completed": 16,
                 "ttft": {"median_ms": 38.0, "p90_ms": 41.2, ...}, "goodput": null, ...}],
     "conformance": [{"name": "chat streaming with usage", "status": "passed", "detail": ""}],
     "nodes": [{"node": "spark1", "gpu": "NVIDIA GB10", "driver": "580.95.05"}],
     "evidence": [{"label": "engine log spark1", "path": "evidence/spark1-engine.log"}]}
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from infergate.inference.metrics import (
    Distribution,
    LevelSummary,
    summary_from_dict,
    summary_to_dict,
)
from infergate.inference.samples import EngineSample, LevelSamples
from infergate.plan.secrets import private_dir, write_private
from infergate.reports import plots
from infergate.reports.outputs import SCHEMA_VERSION, levels_csv
from infergate.reports.page import CSS, table
from infergate.reports.version import ToolVersion, tool_version


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
    tool: ToolVersion = field(default_factory=tool_version)  # what measured it


def write_report(out_dir: Path, results: Results) -> tuple[Path, Path]:
    """Write results.json, results.csv and report.html into out_dir, for this user alone
    (0700, 0600); return the paths of the JSON and the page."""
    private_dir(out_dir)
    json_path, html_path = out_dir / "results.json", out_dir / "report.html"
    write_private(json_path, json.dumps(_to_json(results), indent=2) + "\n")
    write_private(out_dir / "results.csv", levels_csv(results.levels))
    write_private(html_path, render_html(results))
    return json_path, html_path


def read_results(path: Path) -> Results:
    """results.json back into Results (the inverse of write_report's JSON); a file of
    another schema_version is refused, naming both."""
    data: dict[str, Any] = json.loads(path.read_text())
    found = data.get("schema_version", 1)
    if found != SCHEMA_VERSION:
        raise ValueError(
            f"{path} has schema_version {found}; this infergate reads {SCHEMA_VERSION}"
        )
    return Results(
        meta=ReportMeta(**data["meta"]),
        levels=tuple(summary_from_dict(level) for level in data["levels"]),
        conformance=tuple(Outcome(**o) for o in data["conformance"]),
        nodes=tuple(data["nodes"]),
        evidence=tuple(Evidence(**e) for e in data["evidence"]),
        tool=ToolVersion(**data["tool"]),
    )


def _to_json(results: Results) -> dict[str, object]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": asdict(results.tool),
        "meta": asdict(results.meta),
        "levels": [summary_to_dict(level) for level in results.levels],
        "conformance": [asdict(o) for o in results.conformance],
        "nodes": [dict(n) for n in results.nodes],
        "evidence": [asdict(e) for e in results.evidence],
    }


# --- HTML --------------------------------------------------------------------------------


def render_html(results: Results) -> str:
    m, e = results.meta, html.escape
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>infergate inference: {e(m.inventory)}</title><style>{CSS}</style></head><body>",
        f"<h1>Inference report: {e(m.inventory)}</h1>",
        f"<p class=meta>endpoint {e(m.endpoint)} &middot; model {e(m.model)} &middot; {e(m.time)}",
        "<h2>Tokens/s and latency per level</h2>",
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
    """Against concurrency, the closed-loop levels; the latency-throughput curve, all."""
    if not levels:
        return "<p>No plots: no level of the load was measured."
    closed = [s for s in levels if s.request_rate is None]
    against = [plots.plot_throughput(closed), plots.plot_ttft(closed)] if closed else []
    return _plots([*against, plots.plot_latency_throughput(levels)])


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


def _ms(d: Distribution) -> list[str]:
    return [f"{d.median_ms:.1f}", f"{d.p99_ms:.1f}"] if d.count else ["&ndash;", "&ndash;"]


def _levels_table(levels: Sequence[LevelSummary]) -> str:
    header = [
        "level", "TTFT median ms", "TTFT p99 ms", "TPOT median ms", "TPOT p99 ms",
        "ITL median ms", "ITL p99 ms", "E2E median ms", "E2E p99 ms", "output tok/s",
        "total tok/s", "tok/s per stream", "goodput req/s", "completed", "failed",
    ]  # fmt: skip
    return table(header, [_level_row(s) for s in levels])


def _level_row(s: LevelSummary) -> list[str]:
    failed = f"<span class={'fail' if s.failed else 'pass'}>{s.failed}</span>"
    throughput = [f"{s.output_throughput:.1f}", f"{s.total_token_throughput:.1f}",
                  f"{s.per_stream_tok_s:.1f}"]  # fmt: skip
    good = "&ndash;" if s.goodput is None else f"{s.goodput.per_s:.2f} ({s.goodput.fraction:.0%})"
    return [html.escape(s.label), *_ms(s.ttft), *_ms(s.tpot), *_ms(s.itl), *_ms(s.e2el),
            *throughput, good, str(s.completed), failed]  # fmt: skip


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
    return "<h2>Checks</h2>" + table(["check", "result", "detail"], rows, "checks")


def _nodes(nodes: Sequence[Mapping[str, object]]) -> str:
    if not nodes:
        return ""
    keys = list(dict.fromkeys(k for n in nodes for k in n))
    rows = [[html.escape(str(n.get(k, ""))) for k in keys] for n in nodes]
    return "<h2>Nodes</h2>" + table(keys, rows, "text")


def _evidence(evidence: Sequence[Evidence]) -> str:
    if not evidence:
        return ""
    items = "".join(
        f'<li><a href="{html.escape(e.path, quote=True)}">{html.escape(e.label)}</a> '
        f"<code>{html.escape(e.path)}</code></li>"
        for e in evidence
    )
    return f"<h2>Evidence</h2><ul>{items}</ul>"
