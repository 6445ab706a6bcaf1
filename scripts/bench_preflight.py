"""Warm wall time of the host-level preflight (`pytest -m preflight -n auto` over the host,
fabric and memory checks) against a 2-node and a 16-node lab. The image and model checks
are left out: the 16-node lab carries no engine (3 GB of image on each of 16 nodes).

Measured side by side in one run, on this machine: for each lab size, one warm-up run
(first SSH connections, Python bytecode caches), then REPEATS timed runs; prints the
median and the 16-node/2-node ratio. The lab is left with 2 nodes.

    python scripts/bench_preflight.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB_INVENTORY = "/var/lib/infergate-lab/inventory.yaml"


def lab_up(nodes: int) -> None:
    subprocess.run([sys.executable, "-m", "infergate.lab", "up", "-n", str(nodes)], check=True)


def preflight_seconds() -> float:
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "preflight",
        *(f"tests_preflight/test_{name}.py" for name in ("host", "fabric", "memory")),
        "-n",
        "auto",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--inventory={LAB_INVENTORY}",  # =: a separate path outside the project moves rootdir
    ]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"preflight failed, not timing a red run:\n{done.stdout[-3000:]}")
    return elapsed


def measure(nodes: int, repeats: int) -> list[float]:
    lab_up(nodes)
    preflight_seconds()  # warm-up
    return [preflight_seconds() for _ in range(repeats)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    try:
        times = {n: measure(n, repeats) for n in (2, 16)}
    finally:
        lab_up(2)
    print(f"\npytest -m preflight -n auto, warm, {repeats} runs each (seconds)")
    print(f"{'nodes':>5}  {'median':>7}  {'min':>6}  {'max':>6}")
    for n, t in times.items():
        print(f"{n:>5}  {statistics.median(t):7.2f}  {min(t):6.2f}  {max(t):6.2f}")
    ratio = statistics.median(times[16]) / statistics.median(times[2])
    print(f"16 nodes / 2 nodes: {ratio:.2f}x  (goal: 2 nodes <= 5 s, ratio <= 1.5x)")


if __name__ == "__main__":
    main()
