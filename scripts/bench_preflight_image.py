"""The full preflight (in-image probes included) against one bare container import of the
engine, side by side in one run on the 2-node lab; and the host-level preflight alone.

    python scripts/bench_preflight_image.py [--repeats 3]

Each round times, one after the other: `docker run --rm IMAGE python3 -c 'import vllm'` on
node1 (the floor any in-image check pays); `pytest -m preflight` (every check, the in-image
probes batched into one container per node, all nodes at once) with `--in-image fresh` (a
new image or plan: the engine imported and its registry and parser run) and with the facts
the nodes cached in the run before (the rendezvous and CUDA init run all the same), each in
one process and with two xdist workers (`-n 2`; `-n auto` runs 2 nodes in one process); and
`pytest -m "preflight and not image"` (host level only).
Needs the lab with its engine: `python -m infergate_lab up && python -m infergate_lab engine`.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import yaml
from bench_timing import green_pytest_seconds

from infergate.plan.model import parse_inventory
from infergate_lab import Lab

ROOT = Path(__file__).resolve().parents[1]
PLAN = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))


def bare_import(lab: Lab) -> float:
    command = f"docker run --rm --entrypoint= {PLAN.image.ref} python3 -c 'import vllm'"
    start = time.perf_counter()
    done = lab.ssh("node1", [shlex.join(["sh", "-c", command])], timeout=300)
    if done.returncode != 0:
        sys.exit(f"bare import failed: {done.stderr[-500:]}")
    return time.perf_counter() - start


def preflight(*args: str) -> float:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return green_pytest_seconds(argv, ROOT)


FULL = ("-m", "preflight")
HOST = ("-m", "preflight and not image")
RUNS = {
    "full, fresh": (*FULL, "--in-image", "fresh"),
    "full, cached": FULL,
    "full, cached, -n 2": (*FULL, "-n", "2"),
    "host level": HOST,
    "host level, -n 2": (*HOST, "-n", "2"),
}


def measure(repeats: int, runs: dict[str, tuple[str, ...]] = RUNS) -> dict[str, list[float]]:
    """Seconds of each round's bare import ("bare") and of each of RUNS, after a warm-up."""
    lab = Lab()
    bare_import(lab)  # warm-up: page cache of the image's files
    preflight(*FULL)  # and the nodes' cache of the engine facts
    rows: dict[str, list[float]] = {"bare": [], **{name: [] for name in runs}}
    for _ in range(repeats):
        rows["bare"].append(bare_import(lab))
        for name, args in runs.items():
            rows[name].append(preflight(*args))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    rows = measure(repeats)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\n2-node lab, {repeats} rounds, median seconds (min-max)")
    bare_label = "docker run IMAGE python3 -c 'import vllm' (node1)"
    print(f"  {bare_label:<52} {_cell(rows['bare'])}")
    for name, args in RUNS.items():
        print(f"  {'pytest ' + ' '.join(args):<52} {_cell(rows[name])}")
    bare = med["bare"]
    print(
        f"full preflight / bare import: fresh {med['full, fresh'] / bare:.2f}x, "
        f"cached {med['full, cached'] / bare:.2f}x, cached -n 2 "
        f"{med['full, cached, -n 2'] / bare:.2f}x (goal <= 1.5x); host level alone: "
        f"{med['host level']:.2f} s, -n 2 {med['host level, -n 2']:.2f} s (goal <= 5 s)"
    )


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f}  ({min(values):.2f}-{max(values):.2f})"


if __name__ == "__main__":
    main()
