"""The pytest-timeout backstop never undercuts the plan, for real in the lab: with a
backstop (`-o timeout=5`) far below the launch, a launch that takes longer still passes,
and a missed milestone deadline fails with infergate's own message, not pytest-timeout's.

Both run the lab's TP 2 plan (inventories/lab-moe-tp2.yaml)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from infergate.engines.labels import RUN_LABEL
from infergate_lab import Lab
from selftest.suite import ROOT, SuiteRun, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

TP2 = ROOT / "inventories" / "lab-moe-tp2.yaml"
# 5 s: the TP 2 launch was ready after 22 s here with its compile cache warm; 20 s (the
# issue's figure) would leave a faster machine's launch proving nothing
BACKSTOP = ("-o", "timeout=5")
PYTEST_TIMEOUT = "Timeout (>"  # how pytest-timeout's failure begins
JOINED = "test_deploy.py::test_every_planned_node_joined"


def suite(pytester: pytest.Pytester, plan: Path, marks: str) -> SuiteRun:
    report = str(pytester.path / "report")
    return run_suite(pytester, "--report-dir", report, "-m", marks, *BACKSTOP, inventory=plan)


def ready_after(pytester: pytest.Pytester) -> float:
    """The launch's own clock when the API answered: `[  45.3 s] ready: http://...`."""
    log = (pytester.path / "report" / "deploy.log").read_text()
    found = re.search(r"\[\s*([\d.]+) s\] ready: ", log)
    assert found, log
    return float(found.group(1))


def run_containers(lab: Lab) -> dict[str, list[str]]:
    found = {n: lab.ssh(n, [f"docker ps -aq --filter label={RUN_LABEL}"]).stdout.split()
             for n in ("node1", "node2")}  # fmt: skip
    return {n: ids for n, ids in found.items() if ids}


def test_launch_longer_than_the_backstop_passes(engine_lab, pytester):
    run = suite(pytester, TP2, "deploy or inference")
    assert run.red() == set(), run.output
    assert PYTEST_TIMEOUT not in run.output
    assert ready_after(pytester) > 5 * 2, "the launch hardly outlasted the backstop"
    assert "test_performance.py::test_throughput_meets_the_plan" in run.outcomes
    assert run_containers(engine_lab) == {}


def test_missed_init_deadline_fails_with_the_milestone_message(engine_lab, pytester, tmp_path):
    # the head drops every packet to the dist-init port: no rank finishes init, and vLLM's
    # own store timeout (--distributed-timeout-seconds 60) comes after the plan's 45 s
    engine_lab.apply_fault("drop-port", "node1", "29501")
    plan = yaml.safe_load(TP2.read_text())
    plan["thresholds"]["dist_init_timeout_s"] = 45
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    run = suite(pytester, path, "deploy")
    assert JOINED in run.red(), run.output
    message = run.message(JOINED)
    assert "no `distributed init` line after" in message, message
    assert "within 45 s (thresholds.dist_init_timeout_s)" in message
    assert PYTEST_TIMEOUT not in run.output
    assert run_containers(engine_lab) == {}
