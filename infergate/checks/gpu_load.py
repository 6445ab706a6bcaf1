"""A GPU under load: scripts/gpu_load.py's bf16 matmuls on every GPU of a node for the plan's
seconds, `nvidia-smi --query-gpu` sampled meanwhile, judged here. Heat, hardware slowdown or a
power brake during the load is a fault; the SW power cap a loaded GPU rides is not; GPUs of one
model hold one SM clock under load within the plan's spread (docs/checks.md#gpu-load).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files

from infergate.checks.gpu import _csv
from infergate.checks.gpu_health import FAULT_REASONS, _float, _int, decode_reasons
from infergate.checks.gpu_kernel import check_kernel_gpu_log
from infergate.checks.kernel_log import KernelLog
from infergate.problems import Problem

SCRIPT = files("infergate.checks").joinpath("scripts/gpu_load.py").read_text()
LOAD_FIELDS = (
    "index",
    "name",
    "clocks.current.sm",
    "clocks.max.sm",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "utilization.gpu",
    "clocks_event_reasons.active",
)
SAMPLE_INTERVAL_S = 0.5
# what the script needs beside the load: torch's import, the warm-up, the last samples
SCRIPT_ALLOWANCE_S = 120
BUSY_UTILIZATION_PCT = 50  # a sample of a GPU that runs the load
GPU_IDLE = 0x1  # clocks_event_reasons: nothing runs on the GPU


def load_command(seconds: float) -> list[str]:
    """The container's command: scripts/gpu_load.py for SECONDS, sampling every interval."""
    args = [f"{seconds:g}", f"{SAMPLE_INTERVAL_S:g}", ",".join(LOAD_FIELDS)]
    return ["python3", "-c", SCRIPT, *args]


@dataclass(frozen=True)
class Sample:
    """One GPU's row of one nvidia-smi call, `t_s` seconds from the load's start."""

    t_s: float
    index: int
    name: str
    sm_mhz: int | None
    sm_max_mhz: int | None
    power_w: float | None
    power_limit_w: float | None
    temperature_c: int | None
    utilization_pct: int | None
    reasons: int | None
    memory_used_mib: int | None = None  # asked by the telemetry only

    def busy(self) -> bool:
        idle = self.reasons is not None and self.reasons & GPU_IDLE
        return (self.utilization_pct or 0) >= BUSY_UTILIZATION_PCT and not idle


@dataclass(frozen=True)
class GpuLoad:
    """The script's report: the load's SECONDS, each GPU's result (matmuls and TFLOP/s, or
    `error`), its samples; `error`/`sampler_error` where the load or nvidia-smi failed."""

    seconds: float
    gpus: tuple[Mapping[str, object], ...]
    samples: tuple[Sample, ...]
    error: str = ""
    sampler_error: str = ""
    wall_s: float | None = None

    def during(self, index: int) -> list[Sample]:
        """GPU INDEX's samples taken while the load ran."""
        return [s for s in self.samples if s.index == index and 0 <= s.t_s <= self.seconds]


def parse_gpu_samples(text: str, fields: Sequence[str] = LOAD_FIELDS) -> list[Sample]:
    """Parse the script's `gpu-samples` lines: the offset from the load's start, then
    `nvidia-smi --query-gpu=<FIELDS> --format=csv,noheader,nounits` (the telemetry's add one).

    Sample line (H100, recorded): ``4.136, 0, NVIDIA H100 80GB HBM3, 1350, 1980, 698.28, 700.00,
    54, 100, 0x0000000000000004``
    """
    return [_sample(row) for row in _csv(text, ("t_s", *fields))]


def _sample(row: Mapping[str, str]) -> Sample:
    return Sample(
        t_s=float(row["t_s"]),
        index=int(row["index"]),
        name=row["name"].strip(),
        sm_mhz=_int(row["clocks.current.sm"]),
        sm_max_mhz=_int(row["clocks.max.sm"]),
        power_w=_float(row["power.draw"]),
        power_limit_w=_float(row["power.limit"]),
        temperature_c=_int(row["temperature.gpu"]),
        utilization_pct=_int(row["utilization.gpu"]),
        reasons=_int(row["clocks_event_reasons.active"]),
        memory_used_mib=_int(row.get("memory.used")),
    )


def parse_gpu_load(load: str, samples: str, samples_rc: int) -> GpuLoad:
    """The script's two sections: `gpu-load`'s JSON and `gpu-samples`' lines (the last of which
    is nvidia-smi's error where SAMPLES_RC is not 0).

    Sample (`gpu-load`, H100): ``{"seconds": 10.0, ..., "gpus": [{"index": 0, "matmuls": 6256,
    "seconds": 10.003, "tflops": 687.6}], "wall_s": 13.396}``
    """
    body = json.loads(load)
    lines = samples.splitlines()
    said = lines.pop().strip() if samples_rc and lines else ""
    return GpuLoad(
        seconds=float(body["seconds"]),
        gpus=tuple(body.get("gpus", ())),
        samples=tuple(parse_gpu_samples("\n".join(lines))),
        error=str(body.get("error", "")),
        sampler_error=f"exit {samples_rc}: {said}" if samples_rc else "",
        wall_s=body.get("wall_s"),
    )


_PERFORMANCE = "`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {index}`"


def check_gpu_load(load: GpuLoad) -> list[Problem]:
    """The load ran on every GPU and was sampled; no GPU was held back by heat, hardware
    slowdown or a power brake while it ran (the SW power cap is no fault)."""
    ran = _load_ran(load)
    if ran:
        return ran
    return [p for gpu in load.gpus for p in _gpu_under_load(load, int(str(gpu["index"])))]


def _load_ran(load: GpuLoad) -> list[Problem]:
    """The script's own failures: no torch or CUDA, no GPU, nvidia-smi missing."""
    if load.error or not load.gpus:
        said = load.error or "torch sees no GPU in the container"
        return [
            Problem(
                found=f"the matmul load did not run: {said[:300]}",
                planned=f"a {load.seconds:g} s bf16 matmul load on every GPU",
                remedy="the image's torch must see the GPUs: `docker run --gpus all IMAGE "
                "python3 -c 'import torch; print(torch.cuda.device_count())'`",
            )
        ]
    if load.sampler_error or not load.samples:
        said = load.sampler_error or "no rows"
        return [
            Problem(
                found=f"nvidia-smi in the container could not sample the load ({said[:300]})",
                planned=f"a sample every {SAMPLE_INTERVAL_S:g} s during the load",
                remedy="the container needs the driver's utilities: NVIDIA_DRIVER_CAPABILITIES "
                "with `utility` (engine.env, or the image's), as the CUDA images set it",
            )
        ]
    return []


def _gpu_under_load(load: GpuLoad, index: int) -> list[Problem]:
    result = next(g for g in load.gpus if g["index"] == index)
    seen = load.during(index)
    if result.get("error") or not any(s.busy() for s in seen):
        return [_not_loaded(load, index, result, seen)]
    faults = [s for s in seen if (s.reasons or 0) & sum(FAULT_REASONS)]
    return [_held_back(faults, len(seen))] if faults else []


def _not_loaded(
    load: GpuLoad, index: int, result: Mapping[str, object], seen: Sequence[Sample]
) -> Problem:
    top = max((s.utilization_pct or 0 for s in seen), default=None)
    watts = max((s.power_w or 0.0 for s in seen), default=None)
    said = result.get("error") or f"{result.get('matmuls', 0)} matmuls"
    return Problem(
        found=f"GPU {index} never ran the load: {said}; {len(seen)} samples during it, "
        f"utilization at most {top} %, power at most {watts} W",
        planned=f"{BUSY_UTILIZATION_PCT} % utilization or more during the {load.seconds:g} s load",
        remedy="the GPU did not take work: `nvidia-smi -q -i "
        f"{index}` for its state (compute mode Prohibited, a MIG layout, a process holding it), "
        "and the container's view (`NVIDIA_VISIBLE_DEVICES`, the plan's docker_args)",
    )


def _held_back(faults: Sequence[Sample], seen: int) -> Problem:
    worst = max(faults, key=lambda s: s.temperature_c or 0)
    names = sorted({n for s in faults for n in decode_reasons(s.reasons or 0) if _fault(n)})
    thermal = any("thermal" in n for n in names)
    brake = any("brake" in n for n in names)
    cause = (
        "the GPU runs too hot under load: check its airflow, fans and inlet temperature"
        if thermal
        else "an external power brake is asserted: check the PSUs, their cabling and the "
        "chassis' power-brake signal (BMC event log)"
        if brake
        else "the board asserts hardware slowdown: check the PSUs, cabling and the BMC event log"
    )
    return Problem(
        found=f"GPU {worst.index} ({worst.name}) held back by {', '.join(names)} in "
        f"{len(faults)} of {seen} samples under load; worst at {worst.temperature_c} C, SM "
        f"{worst.sm_mhz} of {worst.sm_max_mhz} MHz, {worst.power_w} of {worst.power_limit_w} W",
        planned="no thermal or hardware slowdown and no power brake under load "
        "(the SW power cap is normal)",
        remedy=f"{cause}, then {_PERFORMANCE.format(index=worst.index)}",
    )


def _fault(name: str) -> bool:
    return name in FAULT_REASONS.values()


def clock_under_load(load: GpuLoad, index: int) -> float | None:
    """GPU INDEX's median SM clock over its busy samples (the median passes over the ramp)."""
    clocks = [s.sm_mhz for s in load.during(index) if s.busy() and s.sm_mhz is not None]
    return statistics.median(clocks) if clocks else None


def check_load_spread(loads: Mapping[str, GpuLoad], spread_pct: float) -> dict[str, list[Problem]]:
    """GPUs of one model, on every node, hold an SM clock under load within SPREAD_PCT of
    the fastest: a slow GPU sets the pace of every collective."""
    by_model: dict[str, list[tuple[str, Sample, float]]] = {}
    for node, load in loads.items():
        for index in {s.index for s in load.samples}:
            clock = clock_under_load(load, index)
            if clock is not None:
                last = load.during(index)[-1]
                by_model.setdefault(last.name, []).append((node, last, clock))
    problems: dict[str, list[Problem]] = {}
    for seen in by_model.values():
        best_node, best, top = max(seen, key=lambda x: x[2])
        for node, last, clock in seen:
            if clock < top * (1 - spread_pct / 100):
                slow = _slow(last, clock, top, spread_pct, f"{best_node} GPU {best.index}")
                problems.setdefault(node, []).append(slow)
    return problems


def _slow(last: Sample, clock: float, top: float, spread_pct: float, fastest: str) -> Problem:
    below = 100 * (1 - clock / top)
    return Problem(
        found=f"GPU {last.index} ({last.name}) at a median SM {clock:g} MHz under load, "
        f"{below:.0f} % below the fastest ({top:g} MHz, {fastest}); power limit "
        f"{last.power_limit_w} W, max SM {last.sm_max_mhz} MHz",
        planned=f"within {spread_pct:g} % of the fastest {last.name}",
        remedy="compare the slow GPU's settings with the fastest's: its clocks and application "
        f"clocks (`nvidia-smi -q -d CLOCK -i {last.index}`; reset a lock: `sudo nvidia-smi -i "
        f"{last.index} -rgc -rac`), its power limit (`-q -d POWER`), then its cooling",
    )


def check_load_xids(before: KernelLog, after: KernelLog) -> list[Problem]:
    """No Xid or fatal NVRM line logged between the reads BEFORE and AFTER the load."""
    seen = set(before.lines)
    new = KernelLog(after.source, tuple(x for x in after.lines if x not in seen), "")
    return check_kernel_gpu_log(new, "during the load")
