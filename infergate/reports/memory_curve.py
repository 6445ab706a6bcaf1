"""The memory guard's curve of one node, as the reports keep it (results.json's `memory`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infergate.checks.memguard import MemorySample
from infergate.checks.memory import GIB


@dataclass(frozen=True)
class MemoryCurve:
    """One node's samples: seconds since its first, usable GiB, PSI avg10 (None: no PSI)."""

    node: str
    where: str
    enforced: bool  # a breach here stops the run
    floor_gib: float
    t_s: tuple[float, ...]
    available_gib: tuple[float, ...]
    psi_some: tuple[float | None, ...]
    psi_full: tuple[float | None, ...]

    @classmethod
    def of(
        cls, node: str, where: str, enforced: bool, floor_gib: float, s: Sequence[MemorySample]
    ) -> MemoryCurve:
        start = s[0].t_s if s else 0.0
        return cls(
            node,
            where,
            enforced,
            floor_gib,
            tuple(round(x.t_s - start, 2) for x in s),
            tuple(round(x.usable / GIB, 3) for x in s),
            tuple(x.psi_some for x in s),
            tuple(x.psi_full for x in s),
        )

    @property
    def lowest_gib(self) -> float | None:
        return min(self.available_gib, default=None)


def memory_curve(data: Mapping[str, Any]) -> MemoryCurve:
    """A curve read back from results.json (lists there, tuples here)."""
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return MemoryCurve(**fields)
