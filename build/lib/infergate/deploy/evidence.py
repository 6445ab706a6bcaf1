"""A launch's evidence, per node: the container's whole log and its inspection (the Engine
API's), the kernel's OOM lines (the node's shell), each hidden and written private.

A node that cannot be read says so in its file: it never hides the others' evidence.
"""

from __future__ import annotations

import json
from pathlib import Path

from infergate.deploy.state import LaunchState
from infergate.plan.apikey import redact_data
from infergate.plan.secrets import private_dir, write_private

EVIDENCE_S = 60.0  # a whole log, `docker inspect`, dmesg
KERNEL_OOM = "dmesg 2>&1 | grep -iE 'out of memory|oom|killed process' | tail -50"


def save_evidence(s: LaunchState, folder: Path) -> None:
    """Per node, under FOLDER/NODE: container.log, inspect.json, kernel-oom.txt."""
    readers = (
        ("container.log", container_log),
        ("inspect.json", inspection),
        ("kernel-oom.txt", kernel_oom),
    )
    for node in s.watches:
        into = private_dir(folder / node)
        for name, read in readers:
            # an unreachable node must not hide the others' evidence
            try:
                write_private(into / name, s.hide(read(s, node)))
            except Exception as e:
                write_private(into / name, s.hide(f"could not read: {e}\n"))


def container_log(s: LaunchState, node: str) -> str:
    return bytes(s.container(node).logs()).decode(errors="replace")


def inspection(s: LaunchState, node: str) -> str:
    """The container's inspection, its secrets out before it is JSON (which escapes them)."""
    return json.dumps(redact_data(s.container(node).attrs, s.secrets), indent=2) + "\n"


def kernel_oom(s: LaunchState, node: str) -> str:
    out = s.io(node, KERNEL_OOM, EVIDENCE_S)
    return out.stdout + out.stderr
