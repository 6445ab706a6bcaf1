"""SHA-256 of every model file, computed on the node itself (checks/model_hash.py's
command, cached there), every node at once, each node's progress said as it comes."""

from __future__ import annotations

from collections.abc import Callable

from infergate.checks.model_hash import (
    ModelHashes,
    hash_command,
    hash_failed,
    parse_hash_progress,
    parse_model_hashes,
)
from infergate.plan.model import Inventory
from infergate.remote.ssh import NodeCommandFailed, Remote
from infergate.waiting import Deadline

LOOK = "the disk's read rate (`iostat -x 5`); a cached hash reads only what changed"


def hash_model(
    inventory: Inventory, mode: str, say: Callable[[str], None]
) -> Callable[[Remote], ModelHashes]:
    """The hash of a node's model files (MODE: cached or full), saying its progress and its
    figures; a hash that failed is the node's NodeCommandFailed."""
    command = hash_command(inventory.model.path, mode)
    # a full hash of 119 GB reads at disk speed: minutes, not the plan's command deadline
    limit = Deadline(inventory.thresholds.model_hash_timeout_s, "thresholds.model_hash_timeout_s")
    what = f"hashing every file of {inventory.model.path}"

    def hashed(r: Remote) -> ModelHashes:
        def progress(line: str) -> None:
            if done := parse_hash_progress(line):
                say(f"model hash: {r.node.where}: {done}")

        done = r.read(command, what, limit, LOOK, progress)
        if done.exit_status != 0:
            failed = hash_failed(r.node.where, inventory.model.path, done.exit_status, done.stderr)
            raise NodeCommandFailed(failed)
        hashes = parse_model_hashes(done.stdout)
        say(f"model hash: {r.node.where}: {hashes}")
        return hashes

    return hashed
