"""The GPU load (full tier) on a lent H100's recording of scripts/gpu_load.py, run as the suite
runs it (selftest/data/h100-device/gpu-load/: healthy, must pass), and on fault forms
**composed** from it by scripts/compose_gpu_load_faults.py (thermal, power brake, an idle
GPU, a slow GPU, an Xid): the lent hosts allow no change of clocks or power."""

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from infergate.checks.dcgm import judge_dcgm
from infergate.checks.gpu_load import (
    LOAD_FIELDS,
    check_gpu_load,
    check_load_spread,
    check_load_xids,
    clock_under_load,
    load_command,
    parse_gpu_load,
)
from infergate.checks.kernel_log import parse_kernel_log
from infergate.checks.probe import parse_sections
from infergate.plan.model import Ssh, parse_inventory
from infergate.preflight.gpu_load import LoadRun, load_on_node, load_problems
from infergate.problems import Problem
from infergate.remote.ssh import Remote

DATA = Path(__file__).parents[1] / "data"
LOAD = DATA / "h100-device" / "gpu-load"
DCGM = DATA / "dcgm"
LAB = parse_inventory(
    yaml.safe_load((Path(__file__).parents[2] / "inventories" / "lab.yaml").read_text())
)
LOCAL = replace(LAB.nodes[0], ssh=Ssh(connection="local"))


def _load(name):
    sections = parse_sections((LOAD / name).read_text())
    samples = sections["gpu-samples"]
    return parse_gpu_load(sections["gpu-load"].text, samples.text, samples.rc)


def _log(name):
    return parse_kernel_log((LOAD / name).read_text())


@pytest.mark.parametrize("name", ["gpu-load-10s.txt", "gpu-load-3s.txt"])
def test_recorded_load_is_busy_power_capped_and_passes(name):
    load = _load(name)
    assert [g["index"] for g in load.gpus] == [0]
    seen = load.during(0)
    assert len(seen) >= load.seconds  # a sample every half second or so
    busy = [s for s in seen if s.busy()]
    assert busy
    assert all(s.reasons & 0x4 for s in busy[1:])
    assert any(s.t_s < 0 and not s.busy() for s in load.samples)  # idle before the load
    assert check_gpu_load(load) == []


def test_recorded_clock_under_load_is_the_power_capped_one():
    clock = clock_under_load(_load("gpu-load-10s.txt"), 0)
    assert clock is not None
    assert 1200 < clock < 1980


def test_recorded_kernel_log_shows_no_xid_during_the_load():
    assert check_load_xids(_log("kernel-before.txt"), _log("kernel-after.txt")) == []


def test_composed_xid_during_the_load_is_named():
    problems = check_load_xids(_log("kernel-after.txt"), _log("kernel-after-xid.composed.txt"))
    assert len(problems) == 1
    assert "1 Xid line(s) (codes 79) in the kernel log during the load" in problems[0].found
    assert "fallen off" in problems[0].found


def test_xid_logged_before_the_load_is_not_the_loads():
    before = _log("kernel-after-xid.composed.txt")
    assert check_load_xids(before, before) == []


def test_composed_thermal_slowdown_names_heat_first():
    (problem,) = check_gpu_load(_load("gpu-load-thermal.composed.txt"))
    assert "held back by HW thermal slowdown" in problem.found
    assert "at 91 C, SM 1110 of 1980 MHz" in problem.found
    assert problem.remedy.startswith("the GPU runs too hot under load: check its airflow")
    assert "nvidia-smi -q -d PERFORMANCE" in problem.remedy


def test_composed_power_brake_names_the_brake_signal():
    (problem,) = check_gpu_load(_load("gpu-load-brake.composed.txt"))
    assert "held back by HW power brake slowdown, HW slowdown" in problem.found
    assert problem.remedy.startswith("an external power brake is asserted: check the PSUs")


def test_recorded_load_that_never_started_is_named():
    """The script's first version read the load's start before it was set (a race): the GPU
    stayed idle, and the judge named it so."""
    (problem,) = check_gpu_load(_load("gpu-load-not-started.txt"))
    assert problem.found.startswith("GPU 0 never ran the load: 0 matmuls;")


def test_composed_idle_gpu_never_ran_the_load():
    (problem,) = check_gpu_load(_load("gpu-load-idle.composed.txt"))
    assert problem.found.startswith("GPU 0 never ran the load:")
    assert "utilization at most 0 %" in problem.found
    assert "NVIDIA_VISIBLE_DEVICES" in problem.remedy


def test_spread_names_the_slow_gpu_against_the_fastest():
    loads = {"node1": _load("gpu-load-10s.txt"), "node2": _load("gpu-load-slow.composed.txt")}
    problems = check_load_spread(loads, 10)
    assert list(problems) == ["node2"]
    (slow,) = problems["node2"]
    assert "% below the fastest" in slow.found
    assert "node1 GPU 0" in slow.found
    assert slow.planned == "within 10 % of the fastest NVIDIA H100 80GB HBM3"
    assert "-rgc -rac" in slow.remedy
    assert check_load_spread(loads, 25) == {}


def test_recordings_of_one_gpu_are_within_the_default_spread():
    loads = {"a": _load("gpu-load-10s.txt"), "b": _load("gpu-load-3s.txt")}
    assert check_load_spread(loads, 10) == {}


def test_script_without_a_gpu_says_the_load_did_not_run():
    """The script itself, run here (no GPU), as the container would run it."""
    command = load_command(1)
    assert command[:2] == ["python3", "-c"]
    assert command[-1] == ",".join(LOAD_FIELDS)
    done = subprocess.run(
        [sys.executable, *command[1:]], capture_output=True, text=True, timeout=60, check=False
    )
    sections = parse_sections(done.stdout)
    load = parse_gpu_load(sections["gpu-load"].text, *_samples(sections))
    assert load.error or not load.gpus
    (problem,) = check_gpu_load(load)
    assert "the matmul load did not run" in problem.found


def _samples(sections):
    return sections["gpu-samples"].text, sections["gpu-samples"].rc


def test_samples_missing_name_the_container_capability():
    load = replace(_load("gpu-load-10s.txt"), samples=(), sampler_error="exit 127: no nvidia-smi")
    (problem,) = check_gpu_load(load)
    assert "NVIDIA_DRIVER_CAPABILITIES" in problem.remedy


def test_container_that_did_not_run_is_one_problem():
    run = LoadRun(
        None,
        "the engine refused: no such runtime nvidia",
        _log("kernel-before.txt"),
        _log("kernel-after.txt"),
        None,
    )
    (problem,) = load_problems(run)
    assert "did not run: the engine refused" in problem.found


def test_node_reads_around_a_blocked_load_keep_the_kernel_log_and_dcgmi(tmp_path, monkeypatch):
    """On this machine (connection: local): the kernel log read for real before and after, no
    container where the host checks blocked it, then a `dcgmi` on PATH that prints the
    composed failing form (selftest/data/dcgm/) as DCGM would."""
    fake = tmp_path / "dcgmi"
    fake.write_text(f"#!/bin/sh\ncat {DCGM / 'diag-r2-fail.json'}\nexit 226\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    plan = replace(LAB, thresholds=replace(LAB.thresholds, dcgm_diag_level=2))
    blocked = (Problem("no Docker engine", "a running Docker engine", "start it"),)
    run = load_on_node(Remote(LOCAL, None, 30), None, plan, "unit", blocked)
    assert run.load is None
    assert run.blocked == blocked
    assert run.before.source or run.before.unreadable
    assert run.dcgm is not None
    assert run.dcgm.rc == 226
    (failed,) = judge_dcgm(run.dcgm.text, run.dcgm.rc, 2)
    assert "memory failed on GPU 1" in failed.found
