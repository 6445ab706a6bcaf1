"""The pytest-timeout backstop never undercuts the plan, for real in the lab: with a
backstop (`-o timeout=5`) far below the launch, a missed milestone deadline fails with
infergate's own message, not pytest-timeout's. A launch that takes longer than the backstop
still passes: test_deploy_lab's healthy launch runs under the same backstop.

It runs the lab's TP 2 plan (inventories/lab-moe-tp2.yaml)."""

from __future__ import annotations

import pytest
import yaml

from selftest.lab.test_deploy_lab import (
    BACKSTOP,
    JOINED,
    PYTEST_TIMEOUT,
    TP2,
    run_containers,
    suite_args,
)
from selftest.suite import run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]


def test_missed_init_deadline_fails_with_the_milestone_message(engine_lab, pytester, tmp_path):
    # the head drops every packet to the dist-init port: no rank finishes init, and vLLM's
    # own store timeout (--distributed-timeout-seconds 60) comes after the plan's 45 s
    engine_lab.apply_fault("drop-port", "node1", "29501")
    plan = yaml.safe_load(TP2.read_text())
    plan["thresholds"]["dist_init_timeout_s"] = 45
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    run = run_suite(pytester, *suite_args(pytester, "-m", "deploy", *BACKSTOP), inventory=path)
    assert JOINED in run.red(), run.output
    message = run.message(JOINED)
    assert "no `distributed init` line after" in message, message
    assert "within 45 s (thresholds.dist_init_timeout_s)" in message
    assert PYTEST_TIMEOUT not in run.output
    assert run_containers(engine_lab) == {}
