"""Warm wall time of the host-level preflight (`pytest -m preflight` over the host, fabric
and memory checks) against a 2-node and a 16-node lab, in one process, under `-n auto` and `-n 2`.
The image and model checks are left out: the 16-node lab carries no engine (3 GB of image
on each of 16 nodes).

Measured side by side in one run, on this machine: for each lab size, one warm-up run
(first SSH connections, Python bytecode caches), then REPEATS timed runs of each mode,
alternating; prints the medians and the 16-node/2-node ratios. The lab is left with 2 nodes.

    python scripts/bench_preflight.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bench_timing import green_pytest_seconds

ROOT = Path(__file__).resolve().parents[1]
LAB_INVENTORY = "/var/lib/infergate-lab/inventory.yaml"


def lab_up(nodes: int, *flags: str) -> None:
    """The lab at NODES, with FLAGS of `python -m infergate_lab up` (`--sshd-only`)."""
    argv = [sys.executable, "-m", "infergate_lab", "up", "-n", str(nodes), *flags]
    subprocess.run(argv, check=True)


S = TypeVar("S")


def by_size_main(
    doc: str, nodes: list[int], measure: Callable[[int, int], S], report: Callable[[list[S]], None]
) -> None:
    """A bench's command line over lab sizes (`--nodes`, default NODES; `--repeats`): MEASURE
    each size, leave the lab at 2 nodes with Docker whatever happens, then REPORT them."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=nodes)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    report(over_sizes(args.nodes, args.repeats, measure))


def over_sizes(nodes: list[int], repeats: int, measure: Callable[[int, int], S]) -> list[S]:
    """MEASURE the lab at each of NODES, in turn; the lab is left at 2 nodes with Docker,
    whatever happened."""
    try:
        return [measure(n, repeats) for n in nodes]
    finally:
        lab_up(2)


# `-n auto` as the suite sizes it (no workers for a plan this small: fixtures/plugin.py
# auto_workers), and two workers forced, what `-n auto` started before
MODES = {"one process": (), "-n auto": ("-n", "auto"), "-n 2": ("-n", "2")}


def preflight_argv(*extra: str) -> list[str]:
    """`python -m pytest` over the host-level preflight of the lab, with EXTRA arguments."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "preflight",
        *(f"tests_preflight/test_{name}.py" for name in ("host", "fabric", "memory")),
        *extra,
        "-q",
        "-p",
        "no:cacheprovider",
        f"--inventory={LAB_INVENTORY}",  # =: a separate path outside the project moves rootdir
    ]


def preflight_seconds(mode: tuple[str, ...]) -> float:
    return green_pytest_seconds(preflight_argv(*mode), ROOT)


Times = dict[str, list[float]]  # each mode's timed runs, seconds
SIZES = [2, 16]  # the lab sizes compared


def measure_size(nodes: int, repeats: int) -> Times:
    lab_up(nodes)
    times: Times = {name: [] for name in MODES}
    for mode in MODES.values():
        preflight_seconds(mode)  # warm-up
    for _ in range(repeats):
        for name, mode in MODES.items():
            times[name].append(preflight_seconds(mode))
    return times


def measure(repeats: int) -> dict[int, Times]:
    """The timed runs at 2 nodes and at 16; the lab is left with 2 nodes, whatever happened."""
    return dict(zip(SIZES, over_sizes(SIZES, repeats, measure_size), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    times = measure(repeats)
    print(f"\npytest -m preflight (host, fabric, memory), warm, {repeats} runs each (seconds)")
    print(f"{'nodes':>5}  {'mode':<12}  {'median':>7}  {'min':>6}  {'max':>6}")
    for n, modes in times.items():
        for name, t in modes.items():
            print(f"{n:>5}  {name:<12}  {statistics.median(t):7.2f}  {min(t):6.2f}  {max(t):6.2f}")
    for name in MODES:
        ratio = statistics.median(times[16][name]) / statistics.median(times[2][name])
        print(f"{name}: 16 nodes / 2 nodes {ratio:.2f}x  (goal: 2 nodes <= 5 s, ratio <= 1.5x)")


if __name__ == "__main__":
    main()
