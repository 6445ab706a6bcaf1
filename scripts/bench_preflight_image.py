"""The full preflight (in-image probes included) against one bare container import of the
engine, side by side in one run on the 2-node lab; and the host-level preflight alone.

    python scripts/bench_preflight_image.py [--repeats 3]

Each round times, one after the other: `docker run --rm IMAGE python3 -c 'import vllm'` on
node1 (the floor any in-image check pays), `pytest -m preflight -n auto` (every check, the
in-image probes batched into one container per node, all nodes at once), and
`pytest -m "preflight and not image" -n auto` (host-level only). Needs the lab with its
engine: `python -m infergate.lab up && python -m infergate.lab engine`.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from infergate.inventory import parse_inventory
from infergate.lab import Lab

ROOT = Path(__file__).resolve().parents[1]
PLAN = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))


def bare_import(lab: Lab) -> float:
    command = f"docker run --rm --entrypoint= {PLAN.image.ref} python3 -c 'import vllm'"
    start = time.perf_counter()
    done = lab.ssh("node1", [shlex.join(["sh", "-c", command])], timeout=300)
    if done.returncode != 0:
        sys.exit(f"bare import failed: {done.stderr[-500:]}")
    return time.perf_counter() - start


def preflight(marker: str) -> float:
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        marker,
        "-n",
        "auto",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"preflight failed, not timing a red run:\n{done.stdout[-3000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    lab = Lab()
    bare_import(lab)  # warm-up: page cache of the image's files
    preflight("preflight")
    rows: dict[str, list[float]] = {"bare": [], "full": [], "host": []}
    for _ in range(repeats):
        rows["bare"].append(bare_import(lab))
        rows["full"].append(preflight("preflight"))
        rows["host"].append(preflight("preflight and not image"))
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\n2-node lab, {repeats} rounds, median seconds (min-max)")
    for key, label in (
        ("bare", "docker run IMAGE python -c 'import vllm' (node1)"),
        ("full", "pytest -m preflight -n auto (in-image included)"),
        ("host", 'pytest -m "preflight and not image" -n auto'),
    ):
        print(f"  {label:<52} {med[key]:6.2f}  ({min(rows[key]):.2f}-{max(rows[key]):.2f})")
    print(
        f"full preflight / bare import: {med['full'] / med['bare']:.2f}x (goal <= 1.5x); "
        f"host-level alone: {med['host']:.2f} s (goal <= 5 s)"
    )


if __name__ == "__main__":
    main()
