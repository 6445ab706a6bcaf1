"""The record of everything `up` made, so `down` removes exactly that and nothing else.

Saved (atomically) after every change: an `up` that dies half way is still undone by `down`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from infergate_lab.layout import STATE_FILE
from infergate_lab.procs import Proc

# A network link: (namespace, name); "" is the host namespace.
Link = tuple[str, str]


@dataclass
class NodeRecord:
    name: str
    netns: str | None = None
    links: list[Link] = field(default_factory=list)  # deleting one end removes its peer
    mounts: list[str] = field(default_factory=list)  # namespace handles bind-mounted here
    cgroups: list[str] = field(default_factory=list)  # directories, parents first
    dirs: list[str] = field(default_factory=list)  # removed with everything in them
    procs: dict[str, Proc] = field(default_factory=dict)  # "sshd", "dockerd"


@dataclass
class FaultRecord:
    kind: str
    node: str
    args: list[str]
    undo: dict[str, Any] = field(default_factory=dict)  # what `clear` needs (old MTU, pid)


@dataclass
class LabState:
    node_mem_gib: float
    # False: every node runs sshd alone (`up --sshd-only`); a state file from before the
    # choice existed has no key, and its lab ran Docker
    docker: bool = True
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    netns: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)  # the lab's root in each hierarchy
    dirs: list[str] = field(default_factory=list)  # removed with everything in them
    shared_dirs: list[str] = field(default_factory=list)  # absent before; removed if empty
    faults: list[FaultRecord] = field(default_factory=list)
    installed: list[str] = field(default_factory=list)  # Debian packages; `down` keeps them
    # kernel settings a large lab raised, by their path under /proc/sys/net: their values
    # before, restored when no longer needed and by `down`
    sysctls: dict[str, str] = field(default_factory=dict)

    def node(self, name: str) -> NodeRecord:
        return self.nodes.setdefault(name, NodeRecord(name))

    def save(self, path: Path = STATE_FILE) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, path)


def _node(data: dict[str, Any]) -> NodeRecord:
    procs = {k: Proc(**v) for k, v in data.pop("procs").items()}
    links = [(ns, name) for ns, name in data.pop("links")]
    return NodeRecord(**data, procs=procs, links=links)


def load(path: Path = STATE_FILE) -> LabState | None:
    """The recorded lab, or None when there is none."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    nodes = {k: _node(v) for k, v in data.pop("nodes").items()}
    faults = [FaultRecord(**f) for f in data.pop("faults")]
    links = [(ns, name) for ns, name in data.pop("links")]
    return LabState(**data, nodes=nodes, faults=faults, links=links)
