"""The inference report's model: the sweep's levels, the conformance outcomes, the nodes and
the evidence kept, and (for the pictures alone) the samples and the engine's /metrics.

inference_json.py, inference_csv.py and inference_html.py are its formats (files.py writes
them). An evidence path is relative to the report's folder, so the folder moves whole."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from infergate.deploy.chaos import Timeline
from infergate.inference.ladder import RungFigures
from infergate.inference.metrics import LevelSummary
from infergate.inference.roofline import RooflineFigures
from infergate.inference.samples import EngineSample, LevelSamples
from infergate.plan.model import Inference, Node
from infergate.reports.gpu_curve import GpuCurve
from infergate.reports.memory_curve import MemoryCurve
from infergate.reports.summary import summary_row
from infergate.reports.version import ToolVersion, tool_version


@dataclass(frozen=True)
class ReportMeta:
    inventory: str
    endpoint: str
    model: str
    time: str  # ISO 8601


@dataclass(frozen=True)
class Outcome:
    """One conformance check's result, as the test that made it reports it."""

    name: str
    status: str  # passed | failed | skipped, as pytest says
    detail: str = ""  # the failure, or the reason for the skip
    code: str = ""  # a failure's catalogue code (infergate.catalogue), and its severity
    severity: str = ""


@dataclass(frozen=True)
class Evidence:
    label: str
    path: str  # relative to the report's directory

    def __post_init__(self) -> None:
        # the report must move as a folder
        if self.path.startswith("/") or "://" in self.path:
            raise ValueError(f"evidence path {self.path!r} is not relative to the report")


@dataclass(frozen=True)
class Gates:
    """The plan's figures the load is judged by, drawn on its pictures (None: not set)."""

    min_output_tok_s: float | None = None  # inference.min_output_tokens_per_s, highest level
    max_ttft_ms: float | None = None  # inference.max_ttft_ms, the median at concurrency 1
    slo_ttft_ms: float | None = None  # inference.slo.ttft_ms, per request
    slo_tpot_ms: float | None = None  # inference.slo.tpot_ms, per request

    @classmethod
    def of(cls, plan: Inference) -> Gates:
        slo = plan.slo
        return cls(plan.min_output_tokens_per_s, plan.max_ttft_ms, slo.ttft_ms, slo.tpot_ms)


@dataclass(frozen=True)
class Results:
    meta: ReportMeta
    levels: tuple[LevelSummary, ...]
    conformance: tuple[Outcome, ...] = ()
    nodes: tuple[Mapping[str, object], ...] = ()
    evidence: tuple[Evidence, ...] = ()
    samples: tuple[LevelSamples, ...] = ()  # for the pictures; not in results.json
    engine: tuple[EngineSample, ...] = ()
    tool: ToolVersion = field(default_factory=tool_version)
    gates: Gates = Gates()
    ladder: tuple[RungFigures, ...] = ()  # the long-context ladder's rungs
    # per prompt, against the reference (inference.parity): infergate.inference.parity's
    # Comparison.as_dict() and `passed`
    parity: tuple[Mapping[str, object], ...] = ()
    memory: tuple[MemoryCurve, ...] = ()  # the memory guard's curves, per node
    gpus: tuple[GpuCurve, ...] = ()  # each GPU's rows, read beside the memory guard's
    chaos: tuple[Timeline, ...] = ()  # a chaos run's actions (docs/chaos.md)
    roofline: RooflineFigures | None = None  # decode at c = 1 against its ceiling


def node_facts(
    nodes: Sequence[Node], probed: Callable[[Node], object]
) -> tuple[dict[str, str], ...]:
    """Each node's preflight summary row (driver, CUDA, image, model, memory, fabric) from its
    probe's sections; an unreachable node's row says so (--endpoint may test a cluster we
    cannot SSH to)."""
    rows = []
    for node in nodes:
        outcome = probed(node)
        if isinstance(outcome, dict):
            rows.append(summary_row(node, outcome))
        else:
            rows.append({"node": node.name, "address": node.address, "facts": str(outcome)[:200]})
    return tuple(rows)


def evidence_in(report_dir: Path) -> tuple[Evidence, ...]:
    """Every file under REPORT_DIR's evidence/<node>/, labelled `<node>: <file>`."""
    found = sorted(report_dir.glob("evidence/*/*"))
    return tuple(
        Evidence(f"{p.parent.name}: {p.name}", str(p.relative_to(report_dir))) for p in found
    )
