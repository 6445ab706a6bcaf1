"""report.html, the inference report for people: the figures per level, the pictures (each
section with its plots or a sentence saying why it has none), the checks, the nodes and the
evidence. It is self-contained: inline CSS, plots as base64 PNG, no script, no external URL."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from infergate.catalogue import WARN, entry
from infergate.deploy.chaos import PROBES, SHOWN, Timeline
from infergate.inference.ladder import RungFigures
from infergate.inference.metrics import Distribution, LevelSummary
from infergate.inference.roofline import RooflineFigures
from infergate.inference.samples import LevelSamples
from infergate.reports import plots
from infergate.reports.gpu import gpu_section
from infergate.reports.inference import Evidence, Gates, Outcome, Results
from infergate.reports.memory import memory_section
from infergate.reports.page import CSS, table
from infergate.reports.verdict import CLUSTER, Cause, by_where, headline

_NO_TOKENS = "<p>No plot: the run kept no output tokens over time."
_NO_METRICS = (
    "<p>No plot: the engine served no /metrics with vLLM's or SGLang's load figures "
    "while the load ran (or they were not scraped)."
)
_LEVEL_HEADER = (
    *("level", "TTFT median ms", "TTFT p99 ms", "TPOT median ms", "TPOT p99 ms"),
    *("ITL median ms", "ITL p99 ms", "E2E median ms", "E2E p99 ms", "output tok/s"),
    *("total tok/s", "tok/s per stream", "goodput req/s", "completed", "failed"),
)
_STATUS_CLASS = {"passed": "pass", "skipped": "skip", "failed": "fail"}


def render_html(results: Results) -> str:
    m, e = results.meta, html.escape
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>infergate inference: {e(m.inventory)}</title><style>{CSS}</style></head><body>",
        f"<h1>Inference report: {e(m.inventory)}</h1>",
        f"<p class=meta>endpoint {e(m.endpoint)} &middot; model {e(m.model)} &middot; {e(m.time)}",
        _verdict(results.conformance),
        _gates(results.conformance),
        "<h2>Tokens/s and latency per level</h2>",
        table(_LEVEL_HEADER, [_level_row(s) for s in results.levels]),
        _roofline(results.roofline),
        *_pictures(results),
        gpu_section(results.gpus),
        _ladder(results.ladder),
        _parity(results.parity),
        memory_section(results.memory),
        _conformance(results.conformance),
        _nodes(results.nodes),
        _chaos(results.chaos),
    ]
    parts += [_evidence(results.evidence), "</body></html>\n"]
    return "\n".join(parts)


def _verdict(outcomes: Sequence[Outcome]) -> str:
    """verdict.py's headline and causes, from the failed outcomes (each with its code)."""
    causes = [
        Cause(
            o.code,
            CLUSTER,
            o.detail.strip().splitlines()[-1] if o.detail.strip() else "failed",
            "",
            o.name,
            warn=o.severity == WARN,
        )
        for o in outcomes
        if o.status == "failed"
    ]
    ready = not any(not c.warn for c in causes)
    said = "".join(
        f"<div class=cause><b>{html.escape(c.code or '(no code)')}</b> {html.escape(c.check)}: "
        f"{html.escape(c.said)}</div>"
        for _, listed in by_where(causes)
        for c in listed
    )
    head = html.escape(headline(causes, 0))
    return f"<p class='{'pass' if ready else 'fail'}'>{head}</p>{said}"


def _roofline(found: RooflineFigures | None) -> str:
    """Decode at c = 1 against the memory-bandwidth ceiling (docs/performance.md#roofline)."""
    if found is None:
        return "<p class=meta>No roofline: its check did not run.</p>"
    return f"<h2>Decode roofline</h2><p>{html.escape(found.line())}</p>"


def _gates(outcomes: Sequence[Outcome]) -> str:
    """The performance gates (the catalogue's group): each ran or skipped, with the reason."""
    rows = []
    for o in outcomes:
        found = entry(o.name.rpartition("::")[2].partition("[")[0])
        if found is not None and found.group == "performance":
            status = f"<span class={_STATUS_CLASS.get(o.status, 'fail')}>{o.status}</span>"
            rows.append([html.escape(o.name), status, html.escape(o.detail)])
    if not rows:
        return "<p class=meta>No performance gate ran in this run.</p>"
    return "<h2>Performance gates</h2>" + table(["gate", "result", "why"], rows, "checks")


def _pictures(results: Results) -> list[str]:
    """The plots, each section with its pictures or a sentence saying why it has none; one
    sentence for them all where matplotlib is not installed."""
    if not plots.available():
        get = html.escape(plots.GET_THEM)
        return [f"<p>No plots: matplotlib is not installed; for them: <code>{get}</code>"]
    samples, engine = results.samples, results.engine
    tokens = any(level.output_tokens_at for level in samples)
    return [
        _per_level(results.levels, results.gates),
        "<h2>Latency distributions</h2>",
        _distributions(samples),
        "<h2>Output tokens over time</h2>",
        _plots([plots.plot_tokens_over_time(samples)]) if tokens else _NO_TOKENS,
        "<h2>The engine's own /metrics during the load</h2>",
        _plots([plots.plot_engine(engine)]) if engine else _NO_METRICS,
    ]


def _per_level(levels: Sequence[LevelSummary], gates: Gates) -> str:
    """Against concurrency, the closed-loop levels; the latency-throughput curve, all; each
    with the plan's gates on it."""
    if not levels:
        return "<p>No plots: no level of the load was measured."
    closed = [s for s in levels if s.request_rate is None]
    against = [plots.plot_throughput(closed, gates), plots.plot_ttft(closed, gates)]
    return _plots([*(against if closed else []), plots.plot_latency_throughput(levels, gates)])


def _distributions(samples: Sequence[LevelSamples]) -> str:
    kept = [
        (field, name)
        for field, name in (("ttft_ms", "TTFT"), ("itl_ms", "ITL"))
        if any(max(getattr(level, field), default=0) > 0 for level in samples)
    ]
    if not kept:
        return "<p>No distributions: the run kept no TTFT or ITL samples."
    return _plots([plots.plot_cdf(samples, field, name) for field, name in kept])


def _plots(pictures: Sequence[plots.Picture]) -> str:
    images = "".join(
        f'<img src="data:image/png;base64,{p.png}" alt="{html.escape(p.alt, quote=True)}">'
        for p in pictures
    )
    return f"<div class=plots>{images}</div>"


def _ms(d: Distribution) -> list[str]:
    return [f"{d.median_ms:.1f}", f"{d.p99_ms:.1f}"] if d.count else ["&ndash;", "&ndash;"]


def _level_row(s: LevelSummary) -> list[str]:
    failed = f"<span class={'fail' if s.failed else 'pass'}>{s.failed}</span>"
    rates = [s.output_throughput, s.total_token_throughput, s.per_stream_tok_s]
    good = "&ndash;" if s.goodput is None else f"{s.goodput.per_s:.2f} ({s.goodput.fraction:.0%})"
    latencies = [*_ms(s.ttft), *_ms(s.tpot), *_ms(s.itl), *_ms(s.e2el)]
    figures = [*latencies, *(f"{r:.1f}" for r in rates), good, str(s.completed)]
    return [html.escape(s.label), *figures, failed]


_LADDER_HEADER = ("rung", "planned in", "tokens in", "tokens out", "seconds", "first token s")


def _ladder(rungs: Sequence[RungFigures]) -> str:
    """The long-context ladder's rungs, lowest first (docs/context-ladder.md)."""
    if not rungs:
        return ""
    rows = [
        [
            html.escape(r.rung),
            *(str(n) for n in (r.planned_input_tokens, r.prompt_tokens, r.completion_tokens)),
            f"{r.seconds:.1f}",
            "&ndash;" if r.ttft_s is None else f"{r.ttft_s:.2f}",
            f"{r.tokens_per_s:.1f}",
            f"<span class={_STATUS_CLASS.get(r.verdict, 'fail')}>{r.verdict}</span>",
            html.escape(r.said),
        ]
        for r in rungs
    ]
    header = [*_LADDER_HEADER, "tok/s", "verdict", "why"]
    context = f"<p>Context climbed: {html.escape(rungs[0].context)}" if rungs[0].context else ""
    return "<h2>Long-context ladder</h2>" + context + table(header, rows, "checks")


_PARITY_HEADER = (
    *("prompt", "matched / total", "first divergence", "reference token", "served token"),
    *("max drift", "verdict"),
)


def _parity(rows: Sequence[Mapping[str, object]]) -> str:
    """Each prompt against the reference (inference.parity); none where it was not judged."""
    if not rows:
        return ""
    e = html.escape
    cells = [
        [
            e(str(r["prompt"])),
            f"{r['matched']} / {r['total']}",
            "&ndash;" if r["reference_token"] is None else str(r["matched"]),
            e(repr(r["reference_token"])) if r["reference_token"] is not None else "&ndash;",
            e(repr(r["served_token"])) if r["served_token"] is not None else "&ndash;",
            f"{float(str(r['max_drift'])):.3f}",
            f"<span class={'pass' if r['passed'] else 'fail'}>"
            f"{'passed' if r['passed'] else 'failed'}</span>",
        ]
        for r in rows
    ]
    return "<h2>Reference parity</h2>" + table(_PARITY_HEADER, cells, "text")


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


def _chaos(timelines: Sequence[Timeline]) -> str:
    """A chaos run's actions: per action, when each probe noticed and every rank's end."""
    if not timelines:
        return ""
    parts = ["<h2>Failure detection (chaos)</h2>"]
    for t in timelines:
        noticed = [_noticed(t.detect_s(p), t.observe_s) for p in PROBES]
        parts.append(f"<h3>{html.escape(t.action)} on {html.escape(t.where)}</h3>")
        parts.append(table([f"{SHOWN[p]} failed after" for p in PROBES], [noticed]))
        ranks = [
            [html.escape(r.where), html.escape(r.state), html.escape(r.detail)] for r in t.ranks
        ]
        load = [[html.escape("request in flight"), "", html.escape(said)] for said in t.load]
        parts.append(table(["rank", "end state", "detail"], ranks + load, "text"))
    return "\n".join(parts)


def _noticed(seconds: float | None, observe_s: float) -> str:
    if seconds is None:
        return f"<span class=fail>not in {observe_s:g} s</span>"
    return f"{seconds:.1f} s"
