"""The serving image: present on every node with the same image ID.

The ID is the config digest (`.Id`): it survives `docker save | docker load`, while
RepoDigests exist only for images pulled from a registry (`docker load` leaves DIGEST <none>:
https://github.com/docker/cli/issues/6996).
"""

from __future__ import annotations

import shlex
from collections import Counter

from infergate.plan.model import Node
from infergate.problems import Problem

NO_IMAGE = None


def parse_image_id(text: str, rc: int) -> str | None:
    """Parse `docker image inspect --format '{{.Id}}' REF`: ``sha256:1f2e...`` or, when the
    image is absent (exit 1), ``Error: No such image: REF``: None."""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    return line if rc == 0 and line.startswith("sha256:") else NO_IMAGE


def expected_image_id(ids: dict[str, str | None], planned: str | None) -> str | None:
    """The plan's ID, or else the one most nodes have."""
    if planned:
        return planned
    present = Counter(i for i in ids.values() if i)
    return present.most_common(1)[0][0] if present else None


def copy_command(ref: str, source: Node, target: Node) -> str:
    """The two-Spark report's way (docs/notes.md#two-spark-report), run from the controller:
    stream the image from a node that has it, each end reached as the plan reaches it (user,
    port, key, known_hosts, jump hosts)."""
    save = shlex.join(source.ssh_argv("docker", "save", ref))
    return f"{save} | {shlex.join(target.ssh_argv('docker', 'load'))}"


def check_image_parity(
    ref: str, ids: dict[str, str | None], nodes: tuple[Node, ...], planned: str | None
) -> dict[str, list[Problem]]:
    """Every node has the image with the expected ID; the remedy copies it from one that does."""
    expected = expected_image_id(ids, planned)
    source = next((n for n in nodes if expected and ids.get(n.name) == expected), None)
    problems: dict[str, list[Problem]] = {}
    for node in nodes:
        found = ids.get(node.name)
        if found == expected and found:
            continue
        what = f"image {ref} " + (f"with ID {found}" if found else "missing")
        want = f"{ref} with ID {expected}" if expected else f"{ref} present"
        if source is not None:
            fix = copy_command(ref, source, node)
        else:
            fix = f"build or pull {ref} on one node, then copy it: `docker save | ssh docker load`"
        problems[node.name] = [Problem(found=what, planned=want, remedy=fix)]
    return problems
