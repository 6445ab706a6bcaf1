"""`plan check` says everything at once: every problem of a plan in one run, each naming its
key, a misspelt key with the key it was likely meant as (issue 27)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from infergate.plan.loader import load_plan
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


def test_the_old_nccl_floor_key_is_refused_naming_its_new_name_and_unit(tmp_path: Path) -> None:
    """nccl_busbw_min_gbps read as gigabits beside fabric.min_gbps, but was gigabytes."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(lab_with(("thresholds.nccl_busbw_min_gbps", 18))))
    with pytest.raises(InventoryError) as caught:
        load_plan(path)
    (error,) = caught.value.errors
    line = path.read_text().splitlines().index("  nccl_busbw_min_gbps: 18") + 1
    assert (error.path, error.line) == ("thresholds.nccl_busbw_min_gbps", line)
    assert error.message.startswith(
        "renamed thresholds.nccl_busbw_min_gbytes_per_sec (the same number)"
    )
    assert "GB/s, gigabytes" in error.message
    assert "fabric.min_gbps is in Gb/s, gigabits" in error.message
    new = parse_inventory(lab_with(("thresholds.nccl_busbw_min_gbytes_per_sec", 18)))
    assert new.thresholds.nccl_busbw_min_gbytes_per_sec == 18


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


def plan_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [INFERGATE, "plan", "check", f"--inventory={path}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_multi_node_plan_without_the_gloo_pin_fails_plan_check(tmp_path: Path) -> None:
    plan = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    plan["engine"]["env"] = {k: v for k, v in plan["engine"]["env"].items() if "GLOO" not in k}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    done = plan_check(path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL IG-ENGINE-ENV-UNPINNED" in done.stdout
    assert "engine.env lacks GLOO_SOCKET_IFNAME" in done.stdout


@pytest.mark.parametrize("path", sorted((ROOT / "inventories").glob("lab*.yaml")), ids=str)
def test_the_lab_plans_pass_plan_check(path: Path) -> None:
    done = plan_check(path)
    assert done.returncode == 0, done.stdout + done.stderr
