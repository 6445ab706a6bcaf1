"""`infergate down --run ID | --all-runs`: remove, by its label, what a run left on the
nodes (killed before its teardown, or kept with --keep-deployment), and print per node
what it removed.

Nothing without the suite's labels is touched; exit 0 only when a separate listing shows
none of the run's containers left on any node.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from docker import DockerClient

from infergate.deploy.removal import remove_run
from infergate.deploy.runlock import ClusterLock, this_holder
from infergate.plan.model import Inventory, Node
from infergate.problems import describe_all
from infergate.remote.docker_api import node_engine
from infergate.remote.fanout import each
from infergate.remote.ssh_config import control_dir, exit_masters


def down_node(config: Path, node: Node, run_id: str | None, path: str, spare: str | None) -> str:
    """Remove the run's containers on NODE (every run's but SPARE's, the live one, when
    RUN_ID is None) through its Engine API over the plan's SSH; what to print (its
    problems, if any)."""
    with contextlib.ExitStack() as stack:

        def engine() -> DockerClient:
            return stack.enter_context(node_engine(node, config, control_dir()))

        found, problems = remove_run(engine, run_id, path, spare)
    if problems:
        return describe_all(node.where, problems)
    gone = [f"{c.name} (run {c.run_id}, plan {c.plan}, {c.status})" for c in found]
    return f"{node.where}: removed {len(gone)} container(s)" + "".join(f"\n  - {g}" for g in gone)


def live_run(inventory: Inventory, config: Path) -> tuple[ClusterLock, str | None, str]:
    """Hold the cluster lock while removing (no run starts meanwhile); when a run holds it,
    that run is live: its id, and a line that says so."""
    lock = ClusterLock(inventory, config, this_holder("deploy-down", inventory.name), quiet)
    _, _, refusal = lock.take(0)
    if refusal is None or refusal.busy is None:
        return lock, None, ""
    busy = refusal.busy
    live = busy.holder.run_id if busy.holder else None
    who = busy.holder.describe() if busy.holder else f"an unknown holder ({busy.said})"
    return lock, live, f"{refusal.node.where}: the cluster lock is held by {who}"


def quiet(node: Node, why: str) -> None:
    """A lock session of `down` that ends early: the removal goes on (it takes seconds)."""


def down(inventory: Inventory, config: Path, run: str | None, path: str) -> int:
    """Remove RUN's containers (every run's but the live one's, when RUN is None) on every
    node at once, reached through CONFIG; print per node what it removed or its problems.
    0 when nothing of the run is left, 1 when a node could not be cleared."""
    lock, live, note = live_run(inventory, config)
    try:
        if note and (run == live or (run is None and live is None)):
            print(
                f"{note}: it is running; nothing removed. End that run first (its own "
                "teardown removes its containers)"
            )
            return 1
        nodes = {n.name: n for n in inventory.nodes}
        said = list(each(nodes, lambda n: down_node(config, nodes[n], run, path, live)).values())
    finally:
        lock.release()
        exit_masters(config, inventory.nodes)  # finite anyway (ControlPersist), ended now
    print("\n".join(([f"{note}: its containers are left running"] if note else []) + said))
    return 1 if any(" problem(s)\n" in text.split("\n", 1)[0] + "\n" for text in said) else 0
