"""Containers on a node that the plan does not know: the seeds' leftover embeddings server
held 12 GB on node 2 and the worker died of OOM in init_torch_distributed."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from infergate.checks.memory import gib
from infergate.problems import Problem

RUN_LABEL = "infergate.run"  # the label on every container a deploy of this suite starts


@dataclass(frozen=True)
class Container:
    name: str
    image: str
    labels: dict[str, str]
    status: str


def parse_docker_ps_json(text: str) -> list[Container]:
    """Parse `docker ps --no-trunc --format '{{json .}}'`, one JSON object per line.

    Sample line: ``{"Names":"embeddings","Image":"vllm/vllm-openai:v0.9","Labels":"a=b,c=d",
    "Status":"Up 3 days",...}``
    """
    containers = []
    for line in text.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            labels = dict(kv.partition("=")[::2] for kv in doc.get("Labels", "").split(",") if kv)
            containers.append(Container(doc["Names"], doc["Image"], labels, doc.get("Status", "")))
    return containers


_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "kB": 10**3,
          "MB": 10**6, "GB": 10**9}  # fmt: skip


def parse_docker_stats_json(text: str) -> dict[str, int]:
    """Parse `docker stats --no-stream --format '{{json .}}'` into bytes used per container.

    Sample line: ``{"Name":"embeddings","MemUsage":"11.9GiB / 121.7GiB",...}``
    """
    used = {}
    for line in text.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            match = re.match(r"\s*([\d.]+)\s*([A-Za-z]+)", doc.get("MemUsage", ""))
            if match and match.group(2) in _UNITS:
                used[doc["Name"]] = int(float(match.group(1)) * _UNITS[match.group(2)])
    return used


def check_foreign_containers(
    containers: list[Container], memory: dict[str, int], allowed: tuple[str, ...]
) -> list[Problem]:
    """Every running container is this suite's own or allowed by the plan (name globs)."""
    return [
        Problem(
            found=f"container {c.name} (image {c.image}, {c.status}"
            + (f", holding {gib(memory[c.name])}" if c.name in memory else "")
            + ") running",
            planned="no containers beside the engine's (allow.containers: "
            + (", ".join(allowed) or "none")
            + ")",
            remedy=f"check what it serves (`docker inspect {c.name}`), then `docker stop "
            f"{c.name}`; or add its name to allow.containers in the inventory",
        )
        for c in containers
        if RUN_LABEL not in c.labels and not any(fnmatchcase(c.name, g) for g in allowed)
    ]
