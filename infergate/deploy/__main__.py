"""`python -m infergate.deploy down --run ID | --all-runs [--inventory PATH]`: remove what a
run of this suite left on the nodes (a run killed before its teardown, or kept with
--keep-deployment), by its label, on every node of the plan, and prove it with a separate
listing. Nothing without the suite's labels is touched.

Prints, per node (name and address), what it removed, and exits 0 when no container of the
run is left on any node; 1 when a node could not be reached or still holds one.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from infergate.deploy.runs import (
    check_removed,
    list_command,
    parse_run_listing,
    remove_command,
    ssh_command,
)
from infergate.inventory import Inventory, InventoryError, Node
from infergate.plan_yaml import load_plan
from infergate.problems import describe_all

DEFAULT_INVENTORY = "inventories/lab.yaml"
GRACE_S = 5


def run_on(inventory: Inventory, node: Node, command: str, timeout_s: float) -> Ran:
    """Exit status, stdout and stderr's last line; a local deadline kills ssh (124)."""
    argv = ssh_command(node, inventory.thresholds.connect_timeout_s, command)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return Ran(124, "", f"no answer within {timeout_s:g} s")
    lines = done.stderr.strip().splitlines()
    return Ran(done.returncode, done.stdout, lines[-1] if lines else "")


@dataclass(frozen=True)
class Ran:
    status: int
    stdout: str
    said: str


def down_node(inventory: Inventory, node: Node, run_id: str | None, path: str) -> str:
    """Remove the run's containers on NODE; what to print (its problems, if any)."""
    before = run_on(inventory, node, list_command(run_id), 30)
    found = parse_run_listing(before.stdout) if before.status == 0 else []
    removed = run_on(inventory, node, remove_command(run_id, GRACE_S), 60 + GRACE_S)
    after = run_on(inventory, node, list_command(run_id), 30)
    left = [c.name for c in parse_run_listing(after.stdout)] if after.status == 0 else []
    problems = check_removed(run_id, (removed.status, removed.said),
                             (after.status, after.said), left, path)  # fmt: skip
    if problems:
        return describe_all(node.where, problems)
    gone = [f"{c.name} (run {c.run_id}, plan {c.plan}, {c.status})" for c in found]
    return f"{node.where}: removed {len(gone)} container(s)" + "".join(f"\n  - {g}" for g in gone)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infergate.deploy")
    commands = parser.add_subparsers(dest="command", required=True)
    down = commands.add_parser("down", help="remove a run's containers on every node")
    which = down.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", metavar="ID", help="the run id (in its container names)")
    which.add_argument("--all-runs", action="store_true", help="every run of this suite")
    down.add_argument("--inventory", metavar="PATH", default=DEFAULT_INVENTORY)
    args = parser.parse_args(argv)
    try:
        inventory = load_plan(Path(args.inventory))
    except InventoryError as e:
        parser.error(f"--inventory {e.in_file(args.inventory)}")
    with ThreadPoolExecutor(max(1, len(inventory.nodes))) as pool:
        said = list(pool.map(lambda n: down_node(inventory, n, args.run, args.inventory),
                             inventory.nodes))  # fmt: skip
    print("\n".join(said))
    return 1 if any(" problem(s)\n" in text.split("\n", 1)[0] + "\n" for text in said) else 0


if __name__ == "__main__":
    sys.exit(main())
