"""The decode roofline in the lab: each lab node's memory measured by the copy, the ceiling
made from the served model's config.json, and decode at c = 1 against it, on the terminal,
in results.json and in report.html, for SmolLM2 (dense, PP 2); the tiny MoE's (TP 2) is read
from test_secrets_lab's healthy launch (test_deploy_lab.served_and_left_only_what_it_found).

The gate is set low enough that any engine that decodes passes it: the figures are this
machine's (docs/performance.md#roofline-in-the-lab records them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infergate.reports.inference_json import read_results
from selftest.lab.test_deploy_lab import plan_file
from selftest.suite import LAB_PLAN, run_folder_in, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

CHECK = "test_performance.py::test_decode_reaches_the_roofline"
LINE = re.compile(r"roofline: ceiling ([\d.e+]+) tok/s per stream; decode ([\d.e+]+) tok/s at c=1")


def roofline_plan(tmp_path: Path) -> Path:
    """One level at c = 1, of 4 answers of 32 tokens; the gate on, far below any decode."""

    def change(plan: dict) -> None:
        sweep = {"concurrency": [1], "requests_per_level": 4, "output_tokens": 32}
        plan["inference"].update(sweep, ladder={"enabled": False})
        plan["inference"]["roofline"] = {"min_fraction": 0.0001}

    return plan_file(tmp_path, change, base=LAB_PLAN)


def test_roofline_measured_and_reported(engine_lab, pytester, tmp_path):
    report_dir = pytester.path / "report"
    args = ["-m", "inference", "-k", "roofline", "--report-dir", str(report_dir)]
    run = run_suite(pytester, *args, inventory=roofline_plan(tmp_path))
    assert run.outcomes[CHECK].status == "passed", run.output
    copy = re.search(r"roofline: memory copy on 2 node\(s\) in ([\d.]+) s", run.output)
    assert copy, run.output
    said = LINE.search(run.output)
    assert said, run.output
    report = run_folder_in(report_dir)
    found = read_results(report / "results.json").roofline
    assert found is not None
    assert found.roofline is not None, found.unknown
    assert found.fraction is not None
    assert 0 < found.fraction <= 1.2, found  # a decode faster than the ceiling: a wrong model
    assert found.roofline.bandwidth_source.endswith("a 1-thread copy measured")
    assert "Decode roofline" in (report / "report.html").read_text()
    print(f"lab roofline, SmolLM2 PP 2: copy {copy.group(1)} s; {found.line()}")
