"""The decode roofline of one request stream: the bytes a token reads (the active weights, and
the KV cache of the context so far) over the memory bandwidth that reads them.

With tensor parallel, each rank reads its 1/TP share at its own bandwidth, all at once; with
pipeline parallel, the stages run one after another for one stream, so PP adds no speed:
ceiling = TP x (slowest rank's bandwidth) / (bytes per token). Communication, kernels'
overheads and sampling are left out: measured decode is a fraction of it
(docs/performance.md#roofline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from infergate.checks.memory_bandwidth import GB, Bandwidth
from infergate.inference.metrics import LevelSummary
from infergate.inference.weights import TokenWeights
from infergate.plan.model import Inventory
from infergate.problems import Problem

BANDWIDTH_KEY = "inference.roofline.bandwidth_gb_s"


@dataclass(frozen=True)
class RankBandwidth:
    node: str  # the node the rank runs on
    bandwidth: Bandwidth


@dataclass(frozen=True)
class Roofline:
    """The decode ceiling of one stream and what it is made of."""

    ceiling_tok_s: float
    weights_gb: float  # read per token, all ranks together
    kv_gb: float  # the context's KV cache, read per token, all ranks together
    context_tokens: int
    active_params: int
    quantization: str
    tp: int
    pp: int
    slowest_node: str
    bandwidth_gb_s: float  # the slowest rank's
    bandwidth_source: str

    def describe(self) -> str:
        """`9.80 GB/token (9.0 B active params, fp8; KV 0.01 GB at 1088 tokens); TP 2 x 273
        GB/s (node2: ...)`"""
        return (
            f"{self.weights_gb + self.kv_gb:.3g} GB/token ({self.active_params / 1e9:.3g} B "
            f"active params, {self.quantization}; KV {self.kv_gb:.2g} GB at "
            f"{self.context_tokens} tokens); TP {self.tp} x {self.bandwidth_gb_s:.3g} GB/s, "
            f"PP {self.pp} ({self.slowest_node}: {self.bandwidth_source})"
        )


def decode_ceiling(
    weights: TokenWeights,
    kv_bytes_per_token: int,
    context_tokens: int,
    ranks: Sequence[RankBandwidth],
    parallel: tuple[int, int],
) -> Roofline:
    """The ceiling of one stream at CONTEXT_TOKENS, over RANKS' bandwidths (TP, PP)."""
    tp, pp = parallel
    slowest = min(ranks, key=lambda r: r.bandwidth.gb_s)
    kv = kv_bytes_per_token * context_tokens
    per_token = weights.bytes + kv
    return Roofline(
        ceiling_tok_s=tp * slowest.bandwidth.gb_s * GB / per_token,
        weights_gb=weights.bytes / GB,
        kv_gb=kv / GB,
        context_tokens=context_tokens,
        active_params=weights.active_params,
        quantization=weights.quantization,
        tp=tp,
        pp=pp,
        slowest_node=slowest.node,
        bandwidth_gb_s=slowest.bandwidth.gb_s,
        bandwidth_source=slowest.bandwidth.source,
    )


def single_stream(sweep: Sequence[LevelSummary]) -> LevelSummary | None:
    """The closed-loop level at concurrency 1, where one stream decodes alone."""
    return next((s for s in sweep if s.concurrency == 1 and s.request_rate is None), None)


def mean_context(level: LevelSummary) -> int:
    """The context a decode step reads on average: the prompt, and half the answer."""
    done = max(level.completed, 1)
    return round((level.total_input_tokens + level.total_output_tokens / 2) / done)


@dataclass(frozen=True)
class RooflineFigures:
    """What the report shows: the measured decode at c = 1 against the ceiling; `unknown`
    says why there is no ceiling."""

    measured_tok_s: float | None = None  # 1 / median TPOT at concurrency 1
    fraction: float | None = None
    roofline: Roofline | None = None
    unknown: str = ""

    def line(self) -> str:
        """The terminal's and the report's line."""
        if self.roofline is None:
            return f"roofline: not computed: {self.unknown}"
        r = self.roofline
        head = f"roofline: ceiling {r.ceiling_tok_s:.3g} tok/s per stream"
        if self.measured_tok_s is None or self.fraction is None:
            return f"{head}; {r.describe()}"
        measured = f"decode {self.measured_tok_s:.3g} tok/s at c=1 = {self.fraction:.2g} of it"
        return f"{head}; {measured}; {r.describe()}"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def figures(roofline: Roofline, level: LevelSummary | None) -> RooflineFigures:
    """ROOFLINE against LEVEL's decode (1 / median TPOT); no level, no fraction."""
    if level is None or level.per_stream_tok_s <= 0:
        return RooflineFigures(roofline=roofline)
    measured = level.per_stream_tok_s
    return RooflineFigures(measured, measured / roofline.ceiling_tok_s, roofline)


def figures_from_dict(data: dict[str, object] | None) -> RooflineFigures | None:
    """The inverse of as_dict, after a JSON round trip."""
    if data is None:
        return None
    values = dict(data)
    found = values.get("roofline")
    values["roofline"] = Roofline(**found) if isinstance(found, dict) else None
    return RooflineFigures(**values)  # type: ignore[arg-type]


def check_fraction(found: RooflineFigures, min_fraction: float, likely_cause: str) -> list[Problem]:
    """Decode at c = 1 reaches at least MIN_FRACTION of the roofline; LIKELY_CAUSE leads
    the remedy. A ceiling that could not be made, when gated, says why."""
    planned = f"at least {min_fraction:g} of it (inference.roofline.min_fraction)"
    if found.roofline is None:
        remedy = f"fix what it names, or set {BANDWIDTH_KEY} (GB/s per rank)"
        return [
            Problem(found=f"no decode roofline: {found.unknown}", planned=planned, remedy=remedy)
        ]
    if found.fraction is None:
        said = "no decode at c=1 measured: add 1 to inference.concurrency"
        return [Problem(found=said, planned=planned, remedy="add 1 to inference.concurrency")]
    if found.fraction >= min_fraction:
        return []
    r = found.roofline
    return [
        Problem(
            found=f"decode {found.measured_tok_s:.3g} tok/s at c=1 (1 / median TPOT), "
            f"{found.fraction:.2g} of the {r.ceiling_tok_s:.3g} tok/s roofline: {r.describe()}",
            planned=planned,
            remedy=f"{likely_cause}; then the engine's decode path (its attention backend and "
            "GEMM kernels, in its log) and the GPUs' clocks under load",
        )
    ]


def likely_cause(flags: Sequence[str], tp: int, nodes: int, gpus_per_node: int) -> str:
    """What most often holds single-stream decode far below the roofline, by the plan's facts."""
    if "--enforce-eager" in flags:
        return (
            "the engine runs eager (--enforce-eager in engine.flags): every step pays the "
            "framework's launch overhead; drop the flag so CUDA graphs replay the step"
        )
    if nodes > 1 and tp > max(gpus_per_node, 1):
        return (
            f"TP {tp} spans {nodes} nodes: every layer all-reduces over the fabric twice per "
            "token, so the fabric's small-message latency bounds decode (the NCCL latency in "
            "the preflight report)"
        )
    return "the engine's per-step overhead at batch 1 (scheduling, sampling, detokenizing)"


def plan_cause(plan: Inventory) -> str:
    """likely_cause, from the plan's engine flags and nodes."""
    gpus = max((n.gpus for n in plan.nodes), default=0)
    return likely_cause(plan.engine.flags, plan.engine.tensor_parallel, len(plan.nodes), gpus)
