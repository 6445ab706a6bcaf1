"""The full preflight's wall time on the 2-node lab, before and after a change to the catalog,
measured side by side in one run: `infergate preflight --inventory=inventories/lab.yaml`, as a
user runs it, from a checkout of BEFORE (a commit, checked out beside this one with its own
virtualenv) and from this checkout, alternating, after one warm-up each.

Both runs must be green: a red run is not timed. The lab must be up with its engine image
(`python -m infergate_lab up && python -m infergate_lab engine`). `--in-image` picks the
in-image probe's mode for both sides: `cached` (the default, a repeated run) or `fresh` (it
runs the engine's own registry and parser every time).

    python scripts/bench_catalog.py --before COMMIT [--rounds 3] [--in-image cached|fresh]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench_timing import green_seconds

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1.25  # issue 15: the new catalog costs the full preflight less than a quarter more


def checkout(commit: str, where: Path) -> Path:
    """COMMIT checked out at WHERE with its own virtualenv (as `make` makes one)."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), commit],
        check=True,
        capture_output=True,
    )
    subprocess.run(["make", "-C", str(where), ".venv/bin/.installed"], check=True)
    return where


def preflight_seconds(tree: Path, in_image: str) -> float:
    argv = [
        str(tree / ".venv" / "bin" / "infergate"),
        "preflight",
        "--inventory=inventories/lab.yaml",
        f"--in-image={in_image}",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    return green_seconds(argv, tree)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, metavar="COMMIT")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-image", choices=("cached", "fresh"), default="cached")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="infergate-before-") as tmp:
        before = checkout(args.before, Path(tmp) / "tree")
        try:
            trees = {f"before ({args.before[:9]})": before, "after (this checkout)": ROOT}
            times: dict[str, list[float]] = {name: [] for name in trees}
            for tree in trees.values():
                preflight_seconds(tree, args.in_image)  # warm-up: SSH masters, caches
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    times[name].append(preflight_seconds(tree, args.in_image))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)],
                check=False,
            )
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"full preflight, 2-node lab, --in-image={args.in_image}, {args.rounds} rounds")
    for name, t in times.items():
        print(f"  {name:28} median {medians[name]:6.1f} s  ({', '.join(f'{s:.1f}' for s in t)})")
    before_s, after_s = medians.values()
    print(f"  after / before = {after_s / before_s:.2f}  (goal < {GOAL:.2f})")


if __name__ == "__main__":
    main()
