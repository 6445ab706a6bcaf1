"""results.json, the inference report for machines: the tool that measured, the run's meta,
every level's figures, the conformance outcomes, the nodes and the evidence, under a
schema_version (docs/reports.md#resultsjson shows a sample); `read_results` reads it back and
refuses a file of another version. The samples and scrapes stay out: they make pictures."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from infergate.deploy import chaos
from infergate.inference.ladder import RungFigures
from infergate.inference.metrics import summary_from_dict, summary_to_dict
from infergate.inference.roofline import figures_from_dict
from infergate.reports.gpu_curve import gpu_curve
from infergate.reports.inference import Evidence, Gates, Outcome, ReportMeta, Results
from infergate.reports.memory_curve import memory_curve
from infergate.reports.version import ToolVersion

SCHEMA_VERSION = 3  # 1: before schema_version; docs/reports.md says what 2 and 3 added


def render_json(results: Results) -> str:
    return json.dumps(to_json(results), indent=2) + "\n"


def to_json(results: Results) -> dict[str, object]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": asdict(results.tool),
        "meta": asdict(results.meta),
        "levels": [summary_to_dict(level) for level in results.levels],
        "conformance": [asdict(o) for o in results.conformance],
        "nodes": [dict(n) for n in results.nodes],
        "evidence": [asdict(e) for e in results.evidence],
        "gates": asdict(results.gates),
        "ladder": [asdict(r) for r in results.ladder],
        "parity": [dict(p) for p in results.parity],
        "memory": [asdict(c) for c in results.memory],
        "gpus": [asdict(c) | {"figures": asdict(c.figures())} for c in results.gpus],
        "chaos": [chaos.to_dict(t) for t in results.chaos],
        "roofline": results.roofline.as_dict() if results.roofline else None,
    }


def read_results(path: Path) -> Results:
    """results.json back into Results (the inverse of render_json); a file of another
    schema_version is refused, naming both."""
    data: dict[str, Any] = json.loads(path.read_text())
    found = data.get("schema_version", 1)
    if found != SCHEMA_VERSION:
        raise ValueError(
            f"{path} has schema_version {found}; this infergate reads {SCHEMA_VERSION}"
        )
    return Results(
        meta=ReportMeta(**data["meta"]),
        levels=tuple(summary_from_dict(level) for level in data["levels"]),
        conformance=tuple(Outcome(**o) for o in data["conformance"]),
        nodes=tuple(data["nodes"]),
        evidence=tuple(Evidence(**e) for e in data["evidence"]),
        tool=ToolVersion(**data["tool"]),
        gates=Gates(**data.get("gates", {})),  # schema 3 before the gates were written
        ladder=tuple(RungFigures(**r) for r in data.get("ladder", [])),  # none before it
        parity=tuple(data.get("parity", ())),  # before reference parity: none
        memory=tuple(memory_curve(c) for c in data.get("memory", [])),
        gpus=tuple(gpu_curve(c) for c in data.get("gpus", [])),  # none before it
        chaos=tuple(chaos.from_dict(t) for t in data.get("chaos", [])),
        roofline=figures_from_dict(data.get("roofline")),  # none before it
    )
