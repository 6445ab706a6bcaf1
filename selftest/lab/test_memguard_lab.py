"""The memory guard in the lab (docs/memory-guard.md): a process started in node2's memory
cgroup mid-sweep takes the node below the plan's floor; the guard removes this run's containers
on both nodes, the running test fails naming node2, the figures and the hog's growth, later
tests are skipped naming it, and nothing of the run is left, while the hog (the lab's, not the
suite's) still runs until the lab clears it. The green side, the curves of a healthy run in
report.html, is test_secrets_lab's healthy launch, which runs with the guard on."""

from __future__ import annotations

import os
import re
import time

import pytest

from infergate.checks.memory import GIB, memory_facts
from infergate.checks.probe import CGROUP_MEMORY
from infergate_lab import Lab
from selftest.lab.test_deploy_lab import TP2, plan_file, run_containers
from selftest.suite import SuiteProcess, read_junit

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

FLOOR_GIB = 1.0  # the red run's floor: the hog leaves node2 ~0.3 GiB below it
BELOW_GIB = 0.3
STOPPED = "the memory guard stopped run"
WHERE = "node2 (10.251.0.12)"


def guarded_sweep(plan: dict) -> None:
    """The guard on, every 0.5 s; one level long enough (~1 min here) to be hit mid-sweep;
    no context ladder before it (CI's time)."""
    plan["guard"] = {"memory": "on", "memory_floor_gib": FLOOR_GIB, "memory_interval_s": 0.5}
    sweep = {"concurrency": [1], "requests_per_level": 64, "output_tokens": 32}
    plan["inference"].update(sweep, ladder={"enabled": False})


def usable_gib(lab: Lab, node: str) -> float:
    """What the guard reads on NODE now: MemAvailable bounded by the node's cgroup."""
    out = lab.ssh(node, [f"cat /proc/meminfo; {CGROUP_MEMORY}"]).stdout
    return memory_facts(out, out).usable / GIB


def test_memory_hog_mid_sweep_is_stopped_naming_the_node(engine_lab, pytester, tmp_path):
    plan = plan_file(tmp_path, guarded_sweep, base=TP2)
    suite = SuiteProcess(pytester, "run", plan, "-m", "deploy or inference")
    suite.wait_for(r"c=1: \d+/64 done", timeout_s=600)
    hog_gib = usable_gib(engine_lab, "node2") - FLOOR_GIB + BELOW_GIB
    hog = engine_lab.apply_fault("hold-memory", "node2", f"{hog_gib:.2f}")
    held_at = time.monotonic()
    stopped = suite.wait_for(re.escape(STOPPED), timeout_s=60)
    caught_s = time.monotonic() - held_at
    suite.proc.wait(timeout=300)
    outcomes = read_junit(suite.junit)
    red = {t: o for t, o in outcomes.items() if o.status == "failed"}
    assert len(red) == 1, suite.output()
    message = next(iter(red.values())).message
    assert WHERE in message
    assert "guard.memory_floor_gib" in message
    assert f"process {hog.undo['pid']} python3 +" in message  # the hog's growth, named
    assert "this run's containers were removed on every node (node1, node2)" in message
    skipped = [o for o in outcomes.values() if o.status == "skipped" and STOPPED in o.message]
    assert skipped, "no later test was skipped naming the guard"
    assert run_containers(engine_lab) == {}
    os.kill(int(hog.undo["pid"]), 0)  # the lab's hog still runs: the suite stopped only its own
    print(f"caught {caught_s:.1f} s after the hog was resident: {stopped.group(0)}")
