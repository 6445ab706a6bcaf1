"""No table of preflight.html or report.html is wider than the page, at 2, 16 and 128 nodes,
as headless Chromium lays it out at 1400 px; the screenshots stay under the test's tmp
folder."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from infergate.catalogue import CHECKS
from infergate.inference.client import StreamRecord
from infergate.inference.metrics import summarize_records
from infergate.problems import Problem
from infergate.reports import inference_html
from infergate.reports.inference import Outcome, ReportMeta, Results
from infergate.reports.preflight import Cell, Meta, NodeReport, Preflight
from infergate.reports.preflight_html import render_html
from infergate.reports.summary import COLUMNS
from infergate.reports.verdict import Cause
from infergate.reports.version import ToolVersion
from selftest.browser import check_page

WINDOW = 1400
SHORT = Problem("12.0 GiB usable", "at least 30.0 GiB", "stop what holds memory", "IG-MEMORY-SHORT")


def preflight(count: int) -> Preflight:
    """COUNT nodes, every catalogue check passed, node 1's memory and GPU checks red."""
    names = [f"node{i}" for i in range(1, count + 1)]
    checks = tuple(Cell(f"test_x.py::{name}", "passed") for name in CHECKS)
    nodes = []
    for name in names:
        cells = checks
        if name == "node1":
            red = Cell("test_memory.py::test_memory_available_for_plan", "failed", (SHORT,))
            cells = (red, *checks[1:])
        summary = {"node": name, "driver": "580.95.05", "fabric": "10.251.0.11/24"}
        nodes.append(NodeReport(name, f"10.251.0.{len(nodes) + 11}", summary, None, cells))
    parity = {"kernel": {n: "6.1.0" if n != "node1" else "6.8.0" for n in names}}
    long = f"{SHORT.found}: /proc/{'x' * 300}"  # one word wider than the page
    cause = Cause("IG-MEMORY-SHORT", "node1 (10.251.0.11)", long, SHORT.remedy, "t")
    meta = Meta("lab", "2026-12-01T10:00:00+0000", "run1", ToolVersion("infergate", "0.1.0", None))
    return replace(Preflight(meta, tuple(nodes), parity), causes=(cause,))


@pytest.mark.parametrize("count", [2, 16, 128])
def test_no_preflight_table_is_wider_than_the_page(count: int, tmp_path: Path) -> None:
    page = tmp_path / "preflight.html"
    page.write_text(render_html(preflight(count)))
    seen = check_page(page, tmp_path / f"preflight-{count}.png", width=WINDOW)
    print(f"{count} nodes: page {seen.scroll_width} px, tables {max(seen.table_widths)} px")
    assert seen.window_width == WINDOW
    assert seen.scroll_width <= WINDOW
    assert max(seen.table_widths) <= WINDOW


def inference_results(count: int) -> Results:
    """COUNT nodes' summary rows, a level per concurrency, one failure with a long URL."""
    chunks = tuple(0.1 * i for i in range(1, 11))
    usage = {"completion_tokens": 10}
    record = StreamRecord(200, "", 0.0, chunks, 1.0, "x" * 10, "", "length", usage, "")
    levels = tuple(summarize_records([record] * c, 1.0 + c / 10, c) for c in (1, 4, 16, 64))
    url = "http://10.251.0.11:8000/v1/chat/completions?" + "x" * 200
    failed = Outcome("test_conformance.py::test_stream", "failed", f"no [DONE] from {url}")
    rows = tuple(
        {c: f"node{i}" if c == "node" else f"{c} of node{i}" for c in COLUMNS}
        for i in range(1, count + 1)
    )
    meta = ReportMeta("lab", "http://10.251.0.11:8000/v1", "smollm2-135m", "2026-12-01T10:00")
    return Results(meta, levels, (failed, Outcome("test_x.py::test_y", "passed")), rows)


@pytest.mark.parametrize("count", [2, 16, 128])
def test_no_inference_report_table_is_wider_than_the_page(count: int, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(inference_html.render_html(inference_results(count)))
    seen = check_page(page, tmp_path / f"report-{count}.png", width=WINDOW)
    print(f"{count} nodes: page {seen.scroll_width} px, tables {max(seen.table_widths)} px")
    assert seen.window_width == WINDOW
    assert seen.scroll_width <= WINDOW
    assert max(seen.table_widths) <= WINDOW
