"""The GPUs' telemetry over the launch and the load, as the reports keep it (results.json's
`gpus`): per GPU, every row the memory guard's session read (checks/memguard.py), in lists as
`vllm bench serve` keeps its per-request figures, with a few figures over them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infergate.checks.gpu_health import decode_reasons
from infergate.checks.gpu_load import Sample

BUSY_PCT = 50  # a row of a GPU at work: its SM clock counts for the clock under load


@dataclass(frozen=True)
class GpuCurve:
    """One GPU's rows: seconds since its node's first row, and each figure (None where
    nvidia-smi said N/A); `reasons` holds the clock event reasons' masks."""

    node: str
    where: str
    index: int
    name: str
    t_s: tuple[float, ...]
    utilization_pct: tuple[int | None, ...]
    sm_mhz: tuple[int | None, ...]
    power_w: tuple[float | None, ...]
    temperature_c: tuple[int | None, ...]
    memory_used_mib: tuple[int | None, ...]
    reasons: tuple[int | None, ...]

    @classmethod
    def of(cls, node: str, where: str, samples: Sequence[Sample]) -> list[GpuCurve]:
        """A curve per GPU of the node's rows, in the order of their indexes."""
        start = min((s.t_s for s in samples), default=0.0)
        curves = []
        for index in sorted({s.index for s in samples}):
            rows = [s for s in samples if s.index == index]
            curves.append(
                cls(
                    node,
                    where,
                    index,
                    rows[0].name,
                    tuple(round(s.t_s - start, 2) for s in rows),
                    tuple(s.utilization_pct for s in rows),
                    tuple(s.sm_mhz for s in rows),
                    tuple(s.power_w for s in rows),
                    tuple(s.temperature_c for s in rows),
                    tuple(s.memory_used_mib for s in rows),
                    tuple(s.reasons for s in rows),
                )
            )
        return curves

    @property
    def label(self) -> str:
        return f"{self.where} GPU {self.index} ({self.name})"

    def figures(self) -> GpuFigures:
        """The curve's figures: mean utilization, the SM clock at work (its lowest and its
        median), the highest power, temperature and memory in use, every clock event reason
        seen."""
        busy = sorted(
            mhz
            for mhz, pct in zip(self.sm_mhz, self.utilization_pct, strict=True)
            if mhz is not None and (pct or 0) >= BUSY_PCT
        )
        util = [p for p in self.utilization_pct if p is not None]
        return GpuFigures(
            rows=len(self.t_s),
            mean_utilization_pct=round(sum(util) / len(util), 1) if util else None,
            min_busy_sm_mhz=busy[0] if busy else None,
            median_busy_sm_mhz=busy[len(busy) // 2] if busy else None,
            max_power_w=max((w for w in self.power_w if w is not None), default=None),
            max_temperature_c=max((c for c in self.temperature_c if c is not None), default=None),
            max_memory_used_mib=max(
                (m for m in self.memory_used_mib if m is not None), default=None
            ),
            clock_event_reasons=tuple(
                sorted({n for mask in self.reasons if mask for n in decode_reasons(mask)})
            ),
        )


@dataclass(frozen=True)
class GpuFigures:
    rows: int
    mean_utilization_pct: float | None
    min_busy_sm_mhz: int | None  # the SM clock in rows of BUSY_PCT utilization or more
    median_busy_sm_mhz: int | None
    max_power_w: float | None
    max_temperature_c: int | None
    max_memory_used_mib: int | None
    clock_event_reasons: tuple[str, ...]


def gpu_curve(data: Mapping[str, Any]) -> GpuCurve:
    """A curve read back from results.json (lists there, tuples here; the figures dropped,
    being read off the rows)."""
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    fields.pop("figures", None)
    return GpuCurve(**fields)
