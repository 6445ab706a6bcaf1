"""A plan whose engine serves with an API key, launched for real in the lab: with a wrong key
given, the readiness gate fails at the first 401, not at ready_timeout_s, naming the head and
the key's source, and never printing it (no key sent is the same gate's other branch, in
selftest/unit/test_api_key.py). With the key in the plan's flags the launch passes, the key in
no file the run keeps: test_secrets_lab's launch, which has it among its secrets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from selftest.lab.test_deploy_lab import (
    deploy,
    detected_after,
    launch_failure,
    plan_file,
    run_containers,
)
from selftest.suite import run_folder_in

pytestmark = [
    pytest.mark.lab,
    pytest.mark.timeout(900),
    pytest.mark.usefixtures("no_key_in_the_environment"),
]

KEY = "lab-key-5c1e9b7d0a"
WRONG = "not-the-lab-key-42"
AT_ONCE_S = 15  # from the head's `Application startup complete` to the failure: a few polls
HEAD = "node1 (10.251.0.11)"
REFUSED = "HTTP 401 from http://10.251.0.11:8000/v1/models"


def keyed(plan: dict) -> None:
    plan["engine"]["flags"] += ["--api-key", KEY]


def refused_at_once(pytester: pytest.Pytester, message: str, plan: Path) -> None:
    """The failure came a few polls after the API started serving (its first 401), not
    at ready_timeout_s, which the old gate waited out; the machine's speed plays no part."""
    log = (run_folder_in(pytester.path / "report") / "deploy.log").read_text()
    served = re.search(r"\[\s*([\d.]+) s\] node1 \(10.251.0.11\): server ready", log)
    assert served, log
    failed = detected_after(message)
    assert failed - float(served.group(1)) < AT_ONCE_S, log
    assert failed < yaml.safe_load(plan.read_text())["thresholds"]["ready_timeout_s"] - 60


def kept_files_with(report: Path, secret: str) -> list[str]:
    """The files of the run's report directory (deploy.log, evidence, results) holding it."""
    files = [p for p in report.rglob("*") if p.is_file()]
    return [str(p) for p in files if secret in p.read_bytes().decode(errors="replace")]


def test_wrong_key_fails_at_the_first_401_naming_its_source(
    engine_lab, pytester, tmp_path, monkeypatch
):
    monkeypatch.setenv("INFERGATE_API_KEY", WRONG)
    plan = plan_file(tmp_path, keyed)
    message = launch_failure(deploy(pytester, plan))
    assert f"{HEAD}: 1 problem(s)" in message
    assert f"{REFUSED}: the engine rejected the API key sent (from INFERGATE_API_KEY)" in message
    assert "overrides a different key from engine.flags --api-key" in message
    refused_at_once(pytester, message, plan)
    for secret in (KEY, WRONG):
        assert secret not in message
        assert kept_files_with(pytester.path / "report", secret) == []
    assert run_containers(engine_lab) == {}
