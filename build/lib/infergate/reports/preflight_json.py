"""preflight.json, the preflight report for machines: the model's fields as they are, under
a schema_version (docs/reports.md#preflightjson shows a sample); `read_preflight` reads it
back and refuses a file of another version."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from infergate.problems import Problem
from infergate.reports.preflight import Cell, Memory, Meta, ModelHash, NodeReport, Preflight
from infergate.reports.verdict import Cause
from infergate.reports.version import ToolVersion

SCHEMA_VERSION = 3  # 2: each node's model_hash; 3: meta.level, the verdict, blocked, requirements


def render_json(report: Preflight) -> str:
    return json.dumps(to_json(report), indent=2) + "\n"


def to_json(report: Preflight) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, **asdict(report)}


def read_preflight(path: Path) -> Preflight:
    """preflight.json back into a Preflight (the inverse of render_json); a file of another
    schema version is refused, naming both."""
    data: dict[str, Any] = json.loads(path.read_text())
    found = data.get("schema_version")
    if found != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {found!r}, this infergate reads {SCHEMA_VERSION}")
    meta = Meta(**{**data["meta"], "tool": ToolVersion(**data["meta"]["tool"])})
    nodes = tuple(_node(n) for n in data["nodes"])
    causes = tuple(Cause(**c) for c in data["causes"])
    said = data["requirements"]
    return Preflight(meta, nodes, data["parity"], causes, data["not_run"], said)


def _node(data: dict[str, Any]) -> NodeReport:
    memory = Memory(**data["memory"]) if data["memory"] else None
    checks = tuple(
        Cell(**{**c, "problems": tuple(Problem(**p) for p in c["problems"])})
        for c in data["checks"]
    )
    model_hash = ModelHash(**data["model_hash"]) if data["model_hash"] else None
    return NodeReport(data["node"], data["address"], data["summary"], memory, checks, model_hash)
