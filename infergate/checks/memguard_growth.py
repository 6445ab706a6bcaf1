"""What else grew on a node while the memory guard watched: a snapshot of its processes'
RSS and its containers' memory, taken when the guard starts and again at a breach (after this
run's containers are gone), and the difference, largest first (docs/memory-guard.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infergate.engines.labels import RUN_LABEL

PROCESSES = "@@@ ps"
LABELS = "@@@ labels"
CONTAINERS = "@@@ stats"
# docker stats reads every container's cgroup: ~2 s, bounded; no Docker is no containers
SNAPSHOT = f"""echo '{PROCESSES}'
ps -eo pid=,rss=,comm=
echo '{LABELS}'
timeout 10 docker ps --format '{{{{.ID}}}}\t{{{{.Label "{RUN_LABEL}"}}}}' 2>/dev/null
echo '{CONTAINERS}'
timeout 15 docker stats --no-stream --format '{{{{.ID}}}}\t{{{{.Name}}}}\t{{{{.MemUsage}}}}' \
  2>/dev/null
true
"""
MIB = 2**20
GREW_MIN = 64 * MIB  # less is noise: page tables, a log buffer
SHOWN = 5  # the largest, of each kind
_UNITS = {"B": 1, "kB": 1000, "KiB": 1024, "MB": 1000**2, "MiB": MIB, "GB": 1000**3}
_UNITS |= {"GiB": 2**30, "TB": 1000**4, "TiB": 2**40}
_SIZE = re.compile(r"([\d.]+)\s*([A-Za-z]+)")


@dataclass(frozen=True)
class Held:
    """A process (`pid comm`) or a container (its name) and the bytes it held."""

    name: str
    bytes: int


@dataclass(frozen=True)
class Snapshot:
    """A node's processes and containers by key (pid:comm, container name), with their memory."""

    processes: dict[str, Held]
    containers: dict[str, Held]


def parse_size(text: str) -> int:
    """docker's size: ``1.5GiB``, ``512MiB``, ``0B``."""
    found = _SIZE.match(text.strip())
    if not found or found.group(2) not in _UNITS:
        raise ValueError(f"not a size docker prints: {text!r}")
    return int(float(found.group(1)) * _UNITS[found.group(2)])


def parse_snapshot(text: str, run_id: str) -> Snapshot:
    """The SNAPSHOT's output: every process, and the containers not of RUN_ID.

    Sample lines: ``  4121 2621440 python3``, ``3f2a9c0d1e7b\tleftover-embeddings\t201.2MiB /
    6GiB``
    """
    section, processes, containers, ours = "", {}, {}, set()
    for line in text.splitlines():
        if line in (PROCESSES, LABELS, CONTAINERS):
            section = line
        elif section == PROCESSES and len(parts := line.split(None, 2)) == 3:
            if parts[0].isdigit() and parts[1].isdigit():
                key = f"{parts[0]} {parts[2]}"
                processes[key] = Held(f"process {key}", int(parts[1]) * 1024)
        elif section == LABELS and line.partition("\t")[2].strip() == run_id:
            ours.add(line.partition("\t")[0][:12])
        elif section == CONTAINERS and len(cells := line.split("\t")) == 3:
            usage = parse_size(cells[2].split("/")[0])
            if cells[0][:12] not in ours:
                containers[cells[1]] = Held(f"container {cells[1]}", usage)
    return Snapshot(processes, containers)


def grown(before: Snapshot, after: Snapshot) -> list[str]:
    """What grew by GREW_MIN or more, largest first, SHOWN of each kind: `container
    leftover-embeddings (not this run's) +0.2 GiB, now 0.2 GiB`."""
    lines = []
    for kind in ("containers", "processes"):
        was, now = getattr(before, kind), getattr(after, kind)
        deltas = [(h.bytes - (was[k].bytes if k in was else 0), h) for k, h in now.items()]
        big = sorted((d for d in deltas if d[0] >= GREW_MIN), key=lambda d: -d[0])[:SHOWN]
        note = " (not this run's)" if kind == "containers" else ""
        lines += [
            f"{h.name}{note} +{d / 2**30:.2f} GiB, now {h.bytes / 2**30:.2f} GiB" for d, h in big
        ]
    return lines
