"""A stored baseline of tokens/s and TTFT, per deployment, and the judge that compares to it.

A baseline only means something for the same deployment, so it is keyed by what makes one:
the hardware, the image ID, the model manifest's digest and the engine flags. The file's
form: docs/reports.md#the-baseline-file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from infergate.inference.metrics import LevelSummary
from infergate.problems import Problem

FORMAT = "infergate-baseline/1"


@dataclass(frozen=True)
class BaselineKey:
    hardware: str  # e.g. "2x NVIDIA GB10"
    image_id: str  # `docker image inspect --format {{.Id}}`
    model_digest: str  # sha256 of the model manifest file
    engine_flags: str  # the planned flags joined by spaces

    @classmethod
    def of(
        cls, hardware: str, image_id: str, model_digest: str, flags: Sequence[str]
    ) -> BaselineKey:
        return cls(hardware, image_id, model_digest, " ".join(flags))

    @property
    def id(self) -> str:
        return " | ".join((self.hardware, self.image_id, self.model_digest, self.engine_flags))


@dataclass(frozen=True)
class LevelFigures:
    """What a baseline keeps of one concurrency level."""

    output_tok_s: float
    median_ttft_ms: float


Figures = dict[int, LevelFigures]  # by concurrency


def figures_of(summaries: Iterable[LevelSummary]) -> Figures:
    """The closed-loop levels' figures (an open-loop level has concurrency 0: not kept)."""
    return {
        s.concurrency: LevelFigures(s.output_throughput, s.ttft.median_ms)
        for s in summaries
        if s.concurrency
    }


def compare(current: Figures, stored: Figures, tolerance: float) -> list[Problem]:
    """Levels measured both times where tokens/s fell, or median TTFT rose, beyond tolerance.

    Better than the baseline is never a problem; a level only one side has is not compared.
    """
    problems = []
    for level in sorted(current.keys() & stored.keys()):
        now, then = current[level], stored[level]
        floor = then.output_tok_s * (1 - tolerance)
        if now.output_tok_s < floor:
            problems.append(
                Problem(
                    found=f"{now.output_tok_s:.1f} output tok/s at concurrency {level}",
                    planned=f"at least {floor:.1f} tok/s (baseline {then.output_tok_s:.1f} "
                    f"less {tolerance:.0%})",
                    remedy=_REMEDY,
                )
            )
        ceiling = then.median_ttft_ms * (1 + tolerance)
        if now.median_ttft_ms > ceiling:
            problems.append(
                Problem(
                    found=f"median TTFT {now.median_ttft_ms:.1f} ms at concurrency {level}",
                    planned=f"at most {ceiling:.1f} ms (baseline {then.median_ttft_ms:.1f} ms "
                    f"plus {tolerance:.0%})",
                    remedy=_REMEDY,
                )
            )
    return problems


_REMEDY = (
    "find what changed since the baseline run: other GPU users (`nvidia-smi`), clocks and "
    "power caps (`nvidia-smi -q -d CLOCK,POWER`), the fabric (NCCL busbw in preflight); if "
    "the new figure is intended, record a new baseline over the old one"
)


def load(path: Path, key: BaselineKey) -> Figures | None:
    """The figures stored for this key; None when the file or the key is not there."""
    entry = _read(path).get(key.id)
    if not isinstance(entry, dict):
        return None
    levels = entry.get("levels", {})
    return {int(level): LevelFigures(**figures) for level, figures in levels.items()}


def update(path: Path, key: BaselineKey, current: Figures) -> None:
    """Store `current` as this key's baseline, keeping every other key's; written atomically."""
    baselines = _read(path)
    baselines[key.id] = {
        "key": asdict(key),
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "levels": {str(level): asdict(figures) for level, figures in sorted(current.items())},
    }
    text = json.dumps({"format": FORMAT, "baselines": baselines}, indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def _read(path: Path) -> dict[str, object]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not an infergate baseline file ({FORMAT})")
    baselines = data.get("baselines", {})
    if not isinstance(baselines, dict):
        raise ValueError(f"{path}: `baselines` is not a mapping")
    return baselines
