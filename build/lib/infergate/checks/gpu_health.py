"""GPU health before a launch, from one `nvidia-smi --query-gpu` of the probe: throttling that
is a fault, clocks or power held by a setting left behind, uncorrected ECC errors, pending or
failed row remapping; and each node against its peers. A field a GPU cannot read is None:
reported as N/A, neither a pass nor a failure (docs/checks.md#gpu-health).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from infergate.checks.gpu import _UNREADABLE, _csv
from infergate.problems import Problem

HEALTH_FIELDS = (
    "index",
    "name",
    "temperature.gpu",
    "clocks.current.sm",
    "clocks.max.sm",
    "power.draw",
    "power.limit",
    "power.default_limit",
    "clocks_event_reasons.active",
    "clocks.applications.graphics",
    "clocks.default_applications.graphics",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
)

# NVML's clock event reasons that mean heat or hardware holds the GPU back
# (https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html)
FAULT_REASONS = {
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
# a clock setting in force: `nvidia-smi -ac` (applications clocks) or `-lgc` (locked clocks)
APPLICATIONS_CLOCKS = 0x2
OTHER_REASONS = {0x1: "GPU idle", 0x4: "SW power cap", 0x10: "sync boost", 0x100: "display clock"}


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's health fields, None where it cannot read one; `reasons` is the
    clocks_event_reasons.active bitmask, `ecc_uncorrected` counts since the driver loaded."""

    index: int
    name: str
    temperature_c: int | None
    sm_mhz: int | None
    sm_max_mhz: int | None
    power_w: float | None
    power_limit_w: float | None
    power_default_w: float | None
    reasons: int | None
    app_clock_mhz: int | None
    default_app_clock_mhz: int | None
    ecc_uncorrected: int | None
    retired_pending: bool | None
    remap_pending: bool | None
    remap_failed: bool | None

    def unreadable(self) -> list[str]:
        """The health fields this GPU does not report (GB10: ECC, row remapping)."""
        fields = {
            "ECC": self.ecc_uncorrected,
            "retired pages": self.retired_pending,
            "remapped rows": self.remap_pending,
        }
        return [name for name, value in fields.items() if value is None]


def _value(cell: str | None) -> str | None:
    """The cell without its unit (`--format=csv` prints "345 MHz", "80.61 W")."""
    if cell is None or cell.strip() in _UNREADABLE:
        return None
    return cell.strip().split(" ")[0]


def _int(cell: str | None) -> int | None:
    value = _value(cell)
    return None if value is None else int(value, 0)


def _float(cell: str | None) -> float | None:
    value = _value(cell)
    return None if value is None else float(value)


def _yes(cell: str | None) -> bool | None:
    value = _value(cell)
    return None if value is None else value == "Yes"


def parse_nvidia_smi_health(text: str, fields: Sequence[str] = HEALTH_FIELDS) -> list[GpuHealth]:
    """Parse `nvidia-smi --query-gpu=<HEALTH_FIELDS> --format=csv,noheader,nounits` (or
    `--format=csv`, whose header names the fields and whose cells carry units).

    Sample line (H200 under load, recorded): ``0, NVIDIA H200, 61, 1470 MHz, 1980 MHz,
    690.56 W, 700.00 W, ..., 0x0000000000000004, ..., 0, [N/A], No, No``
    """
    return [_health(row) for row in _csv(text, fields)]


def _health(row: Mapping[str, str]) -> GpuHealth:
    return GpuHealth(
        index=int(row["index"]),
        name=row.get("name", "?").strip(),
        temperature_c=_int(row.get("temperature.gpu")),
        sm_mhz=_int(row.get("clocks.current.sm")),
        sm_max_mhz=_int(row.get("clocks.max.sm")),
        power_w=_float(row.get("power.draw")),
        power_limit_w=_float(row.get("power.limit")),
        power_default_w=_float(row.get("power.default_limit")),
        reasons=_int(row.get("clocks_event_reasons.active")),
        app_clock_mhz=_int(row.get("clocks.applications.graphics")),
        default_app_clock_mhz=_int(row.get("clocks.default_applications.graphics")),
        ecc_uncorrected=_int(row.get("ecc.errors.uncorrected.volatile.total")),
        retired_pending=_yes(row.get("retired_pages.pending")),
        remap_pending=_yes(row.get("remapped_rows.pending")),
        remap_failed=_yes(row.get("remapped_rows.failure")),
    )


def decode_reasons(mask: int) -> list[str]:
    """The names of the bits set in a clocks_event_reasons.active mask."""
    names = {**OTHER_REASONS, APPLICATIONS_CLOCKS: "applications clocks setting", **FAULT_REASONS}
    return [name for bit, name in sorted(names.items()) if mask & bit]


def _state(gpu: GpuHealth) -> str:
    """What the GPU showed: temperature, SM clock of its max, power of its limit, reasons."""
    reasons = ", ".join(decode_reasons(gpu.reasons)) if gpu.reasons is not None else "N/A"
    return (
        f"GPU {gpu.index} ({gpu.name}) at {gpu.temperature_c} C, SM {gpu.sm_mhz} of "
        f"{gpu.sm_max_mhz} MHz, {gpu.power_w} of {gpu.power_limit_w} W, "
        f"reasons: {reasons or 'none'}"
    )


def check_gpu_health(gpus: Sequence[GpuHealth]) -> list[Problem]:
    """Every GPU runs unthrottled by heat or hardware, with no clock or power setting left
    behind, no uncorrected ECC error since the driver loaded, and no row remapping pending or
    failed. The power cap a loaded GPU rides (SW power cap) is no fault."""
    return [p for gpu in gpus for p in _gpu_problems(gpu)]


def _gpu_problems(gpu: GpuHealth) -> list[Problem]:
    found = [check(gpu) for check in (_throttled, _clock_setting, _power_capped, _memory_errors)]
    return [p for p in found if p is not None]


def _throttled(gpu: GpuHealth) -> Problem | None:
    faults = [name for bit, name in FAULT_REASONS.items() if (gpu.reasons or 0) & bit]
    if not faults:
        return None
    thermal = any("thermal" in f for f in faults)
    return Problem(
        found=f"{_state(gpu)}: held back by {', '.join(faults)}",
        planned="no thermal or hardware slowdown (SW power cap under load is normal)",
        remedy=(
            "the GPU is too hot: check its airflow and fans, then "
            if thermal
            else "the board or its power supply asserts slowdown: check the PSUs and cabling, then "
        )
        + f"`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {gpu.index}`",
    )


def _clock_setting(gpu: GpuHealth) -> Problem | None:
    held = (gpu.reasons or 0) & APPLICATIONS_CLOCKS
    moved = None not in (gpu.app_clock_mhz, gpu.default_app_clock_mhz) and (
        gpu.app_clock_mhz != gpu.default_app_clock_mhz
    )
    if not held and not moved:
        return None
    return Problem(
        found=f"{_state(gpu)}; applications clock {gpu.app_clock_mhz} MHz "
        f"(default {gpu.default_app_clock_mhz})",
        planned="the GPU's default clocks (no clock lock or applications clocks left behind)",
        remedy=f"a clock setting is left in force: `sudo nvidia-smi -i {gpu.index} -rgc` and "
        f"`sudo nvidia-smi -i {gpu.index} -rac`",
    )


def _power_capped(gpu: GpuHealth) -> Problem | None:
    if gpu.power_limit_w is None or gpu.power_default_w is None:
        return None
    if gpu.power_limit_w >= gpu.power_default_w:
        return None
    return Problem(
        found=f"GPU {gpu.index} ({gpu.name}) power limit {gpu.power_limit_w} W, below its "
        f"default {gpu.power_default_w} W",
        planned="the default power limit",
        remedy="a power cap is left in force: "
        f"`sudo nvidia-smi -i {gpu.index} -pl {gpu.power_default_w:g}`",
    )


def _memory_errors(gpu: GpuHealth) -> Problem | None:
    errors = []
    if gpu.ecc_uncorrected:
        errors.append(f"{gpu.ecc_uncorrected} uncorrected ECC errors since the driver loaded")
    if gpu.retired_pending or gpu.remap_pending:
        errors.append("a page retirement or row remap pending (applied at the next GPU reset)")
    if gpu.remap_failed:
        errors.append("a row remapping failure")
    if not errors:
        return None
    remedy = (
        "the GPU ran out of spare rows: drain the node and have the GPU replaced (RMA)"
        if gpu.remap_failed
        else f"drain the node, reset the GPU (`sudo nvidia-smi -r -i {gpu.index}`, or reboot) so "
        "the remap takes effect, then `nvidia-smi -q -d ECC,ROW_REMAPPER`"
    )
    return Problem(
        found=f"GPU {gpu.index} ({gpu.name}): {'; '.join(errors)}",
        planned="no uncorrected ECC error, no pending or failed remap",
        remedy=remedy,
    )


def health_summary(gpus: Sequence[GpuHealth]) -> str:
    """A cell of the per-node summary: the problems' count, else ok, naming what is N/A."""
    problems = check_gpu_health(gpus)
    unread = sorted({name for gpu in gpus for name in gpu.unreadable()})
    verdict = f"{len(problems)} problem(s)" if problems else "ok"
    return f"{verdict}, N/A: {', '.join(unread)}" if unread else verdict


def check_gpu_peers(health: Mapping[str, Sequence[GpuHealth]]) -> dict[str, list[Problem]]:
    """GPUs of one model share the SM clock ceiling and the power limit on every node: a node
    that differs from the most common value of its peers is named (a capped or locked node
    sets the pace of every collective)."""
    problems: dict[str, list[Problem]] = {}
    for label, read in (("SM clock max", _sm_max), ("power limit", _limit)):
        for node, problem in _odd_ones(health, label, read):
            problems.setdefault(node, []).append(problem)
    return problems


def _sm_max(gpu: GpuHealth) -> float | None:
    return None if gpu.sm_max_mhz is None else float(gpu.sm_max_mhz)


def _limit(gpu: GpuHealth) -> float | None:
    return gpu.power_limit_w


def _odd_ones(
    health: Mapping[str, Sequence[GpuHealth]], label: str, read: Callable[[GpuHealth], float | None]
) -> list[tuple[str, Problem]]:
    by_model: dict[str, list[tuple[str, GpuHealth, float]]] = {}
    for node, gpus in health.items():
        for gpu in gpus:
            value = read(gpu)
            if value is not None:
                by_model.setdefault(gpu.name, []).append((node, gpu, value))
    found = []
    for model, seen in by_model.items():
        values = [v for _, _, v in seen]
        common = max(set(values), key=values.count)
        for node, gpu, value in seen:
            if value != common:
                found.append((node, _peer_problem(gpu, label, value, common, model)))
    return found


def _peer_problem(gpu: GpuHealth, label: str, value: float, common: float, model: str) -> Problem:
    unit = "MHz" if "clock" in label else "W"
    fix = (
        f"`sudo nvidia-smi -i {gpu.index} -rgc` (a clock lock), else compare VBIOS versions "
        "(`nvidia-smi --query-gpu=vbios_version --format=csv`)"
        if "clock" in label
        else f"`sudo nvidia-smi -i {gpu.index} -pl {common:g}` if the cap was set by hand"
    )
    return Problem(
        found=f"GPU {gpu.index} ({model}) {label} {value:g} {unit}",
        planned=f"{common:g} {unit}, as on the other {model} GPUs of the cluster",
        remedy=fix,
    )
