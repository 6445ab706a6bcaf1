"""`plan check` says everything at once: every problem of a plan in one run, each naming its
key, a misspelt key with the key it was likely meant as (issue 27)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from infergate.plan.model import InventoryError, parse_inventory
from selftest.unit.test_inventory import lab_with

ROOT = Path(__file__).resolve().parents[2]
INFERGATE = ROOT / ".venv" / "bin" / "infergate"


def test_three_independent_errors_are_reported_together() -> None:
    plan = lab_with(
        ("nodes[1].ssh.port", 70000), ("image.ref", "--privileged"), ("thresholds.kv_cache_gib", -1)
    )
    with pytest.raises(InventoryError) as caught:
        parse_inventory(plan)
    paths = [e.path for e in caught.value.errors]
    assert paths == ["nodes[1].ssh.port", "image.ref", "thresholds.kv_cache_gib"]


def test_a_misspelt_key_gets_a_suggestion_and_no_missing_key() -> None:
    plan = lab_with(("nodes[0].ssh.prot", 22))
    plan["engine"]["dist_init_prot"] = plan["engine"].pop("dist_init_port")
    with pytest.raises(InventoryError) as caught:
        parse_inventory(plan)
    said = [str(e) for e in caught.value.errors]
    assert len(said) == 2, said
    assert said[0].startswith("nodes[0].ssh.prot: unknown key;")
    assert said[0].endswith("did you mean port?")
    assert said[1].endswith("did you mean dist_init_port?")


def test_plan_check_lists_every_problem_and_exits_4(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    plan = lab_with(("nodes[1].ssh.port", 70000), ("image.ref", "--privileged"))
    path.write_text(yaml.safe_dump(plan))
    done = subprocess.run(
        [INFERGATE, "plan", "check", f"--inventory={path}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 4, done.stderr
    assert f"{path}: 2 problems:" in done.stderr
    assert "nodes[1].ssh.port: 70000 is out of range" in done.stderr
    assert "image.ref: '--privileged' starts with '-'" in done.stderr
