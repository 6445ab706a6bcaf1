"""What every pair costs: the rail test's own seconds (its fixture measures, its body judges)
on the lab with sshd alone on each node, at 2, 4, 16 and 32 nodes (32: past
fabric.all_pairs_up_to, the sampled rounds), with its steps and streams.

    flock /tmp/infergate-lab.lock .venv/bin/python scripts/bench_pairs.py \
        [--nodes 2 4 16 32] [--repeats 3]

Each size: `up -n N --sshd-only`, then REPEATS runs of `pytest -m preflight -k rails` on the
lab's plan; the median of the test's JUnit time is kept. The lab is left with 2 nodes and
Docker. The lab's nodes share this machine's 2 cores: each step's streams run at once, so a
real fabric's step costs its quarter second plus two SSH round trips, not more.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from bench_preflight import LAB_INVENTORY, by_size_main, lab_up

from infergate.checks.pairs import schedule
from infergate.plan.loader import load_plan

ROOT = Path(__file__).resolve().parents[1]
TEST = "test_fabric_rails_carry_planned_bandwidth"


@dataclass(frozen=True)
class Size:
    nodes: int
    steps: int
    streams: int
    sampled: bool
    seconds: float


def rail_test_seconds() -> float:
    """One run of the rail test alone on the lab's plan: its JUnit time (setup and call)."""
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "junit.xml"
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        argv += [f"--junitxml={junit}", f"--inventory={LAB_INVENTORY}", "--report-dir", folder]
        argv += ["-m", "preflight", "-k", "rails", "tests_preflight"]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise SystemExit(f"the rail test did not pass:\n{done.stdout[-3000:]}")
        [case] = [c for c in ET.parse(junit).iter("testcase") if c.get("name") == TEST]
        return float(case.get("time", "nan"))


def measure(nodes: int, repeats: int) -> Size:
    lab_up(nodes, "--sshd-only")
    fabric = load_plan(Path(LAB_INVENTORY)).fabric
    plan = schedule(
        [f"node{i}" for i in range(1, nodes + 1)],
        fabric.all_pairs_up_to,
        fabric.pair_sample_rounds,
        fabric.pair_sample_seed,
    )
    seconds = statistics.median(rail_test_seconds() for _ in range(repeats))
    return Size(nodes, len(plan.steps), plan.streams, plan.sampled, seconds)


def report(sizes: list[Size]) -> None:
    print("| nodes | pairs | steps | streams | rail test (s) | per step (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for s in sizes:
        pairs = "sampled" if s.sampled else "every"
        print(
            f"| {s.nodes} | {pairs} | {s.steps} | {s.streams} | {s.seconds:.2f} "
            f"| {s.seconds / s.steps:.2f} |"
        )


if __name__ == "__main__":
    by_size_main(__doc__ or "", [2, 4, 16, 32], measure, report)
