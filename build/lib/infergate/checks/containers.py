"""Containers on a node that the plan does not know: a leftover holds memory, ports and GPUs
the engine needs (docs/notes.md#two-spark-report). Only this run's own are exempt; another
run's (killed before its teardown, or kept) are named by run."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from fnmatch import fnmatchcase

from infergate.checks.memory import gib
from infergate.engines.labels import PLAN_LABEL, PROBE_LABEL, RUN_LABEL
from infergate.plan.loader import PLAN_OPTION
from infergate.plan.model import plan_key
from infergate.problems import Problem

ALLOW_KEY = plan_key("allow.containers")


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


_UNITS = {
    "B": 1,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "kB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
}


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
    containers: list[Container],
    memory: dict[str, int],
    allowed: tuple[str, ...],
    run_id: str = "",
    inventory_path: str | None = None,
) -> list[Problem]:
    """Every running container is this run's own or allowed by the plan (name globs); one of
    another run of this suite is named with that run's id, plan and age, and the command that
    removes the run."""
    problems = []
    for c in containers:
        owner = c.labels.get(RUN_LABEL) or c.labels.get(PROBE_LABEL)
        if owner:
            if owner != run_id:
                problems.append(_other_run(c, owner, memory, run_id, inventory_path))
        elif not any(fnmatchcase(c.name, g) for g in allowed):
            problems.append(_foreign(c, memory, allowed))
    return problems


def _holding(c: Container, memory: dict[str, int]) -> str:
    return f", holding {gib(memory[c.name])}" if c.name in memory else ""


def _foreign(c: Container, memory: dict[str, int], allowed: tuple[str, ...]) -> Problem:
    return Problem(
        found=f"container {c.name} (image {c.image}, {c.status}{_holding(c, memory)}) running",
        planned=f"no containers beside the engine's ({ALLOW_KEY}: "
        + (", ".join(allowed) or "none")
        + ")",
        remedy=f"check what it serves (`{shlex.join(['docker', 'inspect', c.name])}`), then "
        f"`{shlex.join(['docker', 'stop', c.name])}`; or add its name to {ALLOW_KEY}",
    )


def _other_run(
    c: Container, owner: str, memory: dict[str, int], run_id: str, inventory_path: str | None
) -> Problem:
    kind = (
        "the in-image probe"
        if PROBE_LABEL in c.labels and RUN_LABEL not in c.labels
        else f"plan {c.labels.get(PLAN_LABEL, '?')}"
    )
    return Problem(
        found=f"container {c.name} of infergate run {owner} ({kind}, {c.status}"
        f"{_holding(c, memory)}) running",
        planned=f"no container of another run (this run is {run_id or 'not deploying'})",
        remedy=f"run {owner} ended without removing its containers (killed before its "
        "teardown, or --keep-deployment): if it is not still running elsewhere, remove it "
        f"with `{down_command(owner, inventory_path)}`",
    )


def down_command(run_id: str | None, inventory_path: str | None = None) -> str:
    """The operator's command that removes a run's containers on every node (all runs'
    when RUN_ID is None)."""
    which = ["--all-runs"] if run_id is None else ["--run", run_id]
    where = [PLAN_OPTION, inventory_path] if inventory_path else []
    return shlex.join(["infergate", "down", *which, *where])
