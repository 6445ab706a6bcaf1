"""GPUs as the driver reports them: nvidia-smi's forms, who holds GPU memory, and where free
memory must be read when the GPU has none of its own (GB10: unified memory; nvidia-smi reports
its memory "Not Supported": https://docs.nvidia.com/dgx/dgx-spark/known-issues.html).
"""

from __future__ import annotations

import csv
import enum
import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infergate.plan.model import plan_key
from infergate.problems import Problem

ALLOW_KEY = plan_key("allow.gpu_processes")
GAP_KEY = plan_key("thresholds.page_cache_gap_gib")

GIB = 1024**3
QUERY_GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "driver_version",
    "memory.total",
    "memory.used",
    "memory.free",
    "compute_cap",
)
COMPUTE_APPS_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
# What nvidia-smi prints for a value it cannot read; GB10 answers "[N/A]" for every memory.*
_UNREADABLE = frozenset({"", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "[Unknown Error]"})


@dataclass(frozen=True)
class Gpu:
    """A GPU as nvidia-smi reports it; a memory figure is None where it reports none (GB10's
    unified memory)."""

    index: int
    name: str
    uuid: str | None = None
    driver: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    compute_cap: str | None = None


@dataclass(frozen=True)
class GpuProcess:
    """A process that holds GPU memory; `gpu` is the GPU's UUID (compute-apps) or index (the
    table)."""

    pid: int
    name: str
    used_mib: int | None
    gpu: str | None


@dataclass(frozen=True)
class SmiTable:
    """Plain nvidia-smi: the driver, the newest CUDA it supports ("13.0"), GPUs, processes."""

    driver: str
    cuda: str
    gpus: tuple[Gpu, ...]
    processes: tuple[GpuProcess, ...]


def _mib(value: str) -> int | None:
    value = value.strip().removesuffix("MiB").strip()
    return None if value in _UNREADABLE else int(value)


def _or_none(value: str | None) -> str | None:
    return None if value is None or value.strip() in _UNREADABLE else value.strip()


def _csv(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    rows = [r for r in csv.reader(text.splitlines(), skipinitialspace=True) if r]
    if rows and rows[0][0] in {*fields, *QUERY_GPU_FIELDS, *COMPUTE_APPS_FIELDS}:
        fields = [cell.split(" [")[0] for cell in rows[0]]  # "memory.total [MiB]" -> memory.total
        rows = rows[1:]
    for row in rows:
        if len(row) != len(fields):
            raise ValueError(f"nvidia-smi printed {', '.join(row)!r}, not {len(fields)} CSV fields")
    return [dict(zip(fields, row, strict=True)) for row in rows]


def parse_nvidia_smi_query_gpu(text: str, fields: Sequence[str] = QUERY_GPU_FIELDS) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=<QUERY_GPU_FIELDS> --format=csv,noheader,nounits` (or
    `--format=csv`, whose header names the fields); pass `fields` when the query asked others.

    Sample line: ``0, NVIDIA H200, GPU-715f7b3a-5f16-d91c-563a-e9480197a7b4, 580.159.04,
    143771, 0, 143156, 9.0``; on GB10: ``0, NVIDIA GB10, [N/A], [N/A], [N/A]``
    """
    return [
        Gpu(
            index=int(row["index"]),
            name=row.get("name", "?"),
            uuid=_or_none(row.get("uuid")),
            driver=_or_none(row.get("driver_version")),
            memory_total_mib=_mib(row.get("memory.total", "")),
            memory_used_mib=_mib(row.get("memory.used", "")),
            memory_free_mib=_mib(row.get("memory.free", "")),
            compute_cap=_or_none(row.get("compute_cap")),
        )
        for row in _csv(text, fields)
    ]


def parse_nvidia_smi_compute_apps(
    text: str, fields: Sequence[str] = COMPUTE_APPS_FIELDS
) -> list[GpuProcess]:
    """Parse `nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid
    --format=csv,noheader,nounits`; no GPU user prints nothing at all.

    Sample line: ``624, python3, 12806, GPU-cd4d22aa-501f-2cc0-65ce-7e4b075d8c3c``
    """
    return [
        GpuProcess(
            pid=int(row["pid"]),
            name=row.get("process_name", "?"),
            used_mib=_mib(row.get("used_memory", "")),
            gpu=_or_none(row.get("gpu_uuid")),
        )
        for row in _csv(text, fields)
    ]


_TABLE_HEAD = re.compile(r"Driver Version:\s*(\S+)\s+CUDA Version:\s*(\S+)")
_TABLE_GPU = re.compile(r"^\s*(\d+)\s+(.+?)\s+(?:On|Off)\s*$")
_TABLE_MEMORY = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_TABLE_PROCESS = re.compile(r"^\|\s+(\d+)\s+\S+\s+\S+\s+(\d+)\s+\S+\s+(.+?)\s+(\d+MiB|N/A)\s+\|$")


def parse_nvidia_smi_table(text: str) -> SmiTable:
    """Parse plain `nvidia-smi`: the driver, its CUDA, each GPU's memory and the processes.

    Sample lines: ``| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA
    Version: 13.0     |``; on GB10 the memory cell reads ``Not Supported``.
    """
    head = _TABLE_HEAD.search(text)
    if head is None:
        first = text.strip().splitlines()[:1] or ["(nothing)"]
        raise ValueError(f"no 'Driver Version' in nvidia-smi output: {first[0][:200]}")
    lines = text.splitlines()
    gpus = [
        _table_gpu(line, nxt, head.group(1))
        for line, nxt in zip(lines, [*lines[1:], ""], strict=True)
    ]
    processes = [_table_process(m) for m in map(_TABLE_PROCESS.match, lines) if m]
    return SmiTable(head.group(1), head.group(2), tuple(g for g in gpus if g), tuple(processes))


def _table_gpu(line: str, next_line: str, driver: str) -> Gpu | None:
    cells = line.split("|")
    match = _TABLE_GPU.match(cells[1]) if len(cells) > 3 else None
    if match is None:
        return None
    memory = _TABLE_MEMORY.search(next_line)
    used, total = (int(memory.group(1)), int(memory.group(2))) if memory else (None, None)
    free = total - used if total is not None and used is not None else None
    return Gpu(int(match.group(1)), match.group(2), None, driver, total, used, free)


def _table_process(match: re.Match[str]) -> GpuProcess:
    return GpuProcess(int(match.group(2)), match.group(3), _mib(match.group(4)), match.group(1))


@dataclass(frozen=True)
class TorchFacts:
    """The probe's torch facts; `mem_get_info` is (free, total) bytes per device."""

    torch: str | None
    torch_cuda: str | None
    nccl: str | None
    devices: tuple[str, ...]
    mem_get_info: tuple[tuple[int, int], ...]


def parse_torch_facts_json(text: str) -> TorchFacts:
    """Parse the probe's torch facts: one JSON object, keys as gpu_probe.py writes them.

    Sample: ``{"torch": "2.11.0+cu130", "torch_cuda": "13.0", "nccl": [2, 28, 9], "devices":
    ["NVIDIA H200", ...], "mem_get_info": [[149557477376, 150109880320], ...]}``
    """
    doc = json.loads(text)
    nccl = doc.get("nccl")
    return TorchFacts(
        torch=doc.get("torch"),
        torch_cuda=doc.get("torch_cuda"),
        nccl=".".join(map(str, nccl)) if isinstance(nccl, list) else nccl,
        devices=tuple(doc.get("devices", ())),
        mem_get_info=tuple((int(f), int(t)) for f, t in doc.get("mem_get_info", ())),
    )


def check_driver_versions(
    drivers: Mapping[str, str | None], planned: str | None = None
) -> list[Problem]:
    """An NVIDIA driver answers on every node, the same version everywhere (and the planned
    one, where the plan names it). `drivers` maps node name to its driver_version."""
    missing = sorted(node for node, version in drivers.items() if not version)
    seen = {node: v for node, v in sorted(drivers.items()) if v}
    problems = [_no_driver(missing)] if missing else []
    if len(set(seen.values())) > 1 or (planned and set(seen.values()) - {planned}):
        problems.append(
            Problem(
                found="drivers " + ", ".join(f"{node} {v}" for node, v in seen.items()),
                planned=f"driver {planned}" if planned else "the same driver on every node",
                remedy="install one driver version everywhere (DGX OS: `sudo apt update && "
                "sudo apt full-upgrade`, then reboot); check with "
                "`nvidia-smi --query-gpu=driver_version --format=csv,noheader`",
            )
        )
    return problems


def _no_driver(nodes: list[str]) -> Problem:
    return Problem(
        found=f"no NVIDIA driver answered on {', '.join(nodes)}",
        planned="`nvidia-smi` answering on every node",
        remedy="on each: `nvidia-smi`; if it fails, `lsmod | grep nvidia` and "
        "`sudo dmesg | grep -i nvrm`; (re)install the driver and reboot",
    )


def check_gpu_count(gpus: Sequence[Gpu], planned: int, key: str) -> list[Problem]:
    """The node shows the number of GPUs the plan gives it at KEY (nodes[1].gpus)."""
    if len(gpus) == planned:
        return []
    names = ", ".join(f"{g.index}: {g.name}" for g in gpus) or "none"
    return [
        Problem(
            found=f"{len(gpus)} GPU(s) ({names})",
            planned=f"{planned} GPU(s) ({key})",
            remedy="`nvidia-smi -L`; a GPU missing there: `sudo dmesg | grep -iE 'NVRM|Xid'` "
            f"and reseat/reboot; else fix {key} in the plan",
        )
    ]


def check_foreign_gpu_users(
    apps: Sequence[GpuProcess], allowed: Sequence[str] = (), gpus: Sequence[Gpu] = ()
) -> list[Problem]:
    """No process holds GPU memory unless its name matches an allowed glob (a leftover
    container's 12 GB fails SGLang's TP balance check: docs/notes.md#sizing)."""
    where = {g.uuid: f"GPU {g.index}" for g in gpus if g.uuid}
    return [
        Problem(
            found=f"pid {app.pid} ({app.name}) holds {_held(app)} on "
            f"{where.get(app.gpu or '', app.gpu or 'a GPU')}",
            planned="no GPU users but "
            + (", ".join(allowed) if allowed else "the engine (none before launch)"),
            remedy=f"see what it is: `ps -o pid,user,etime,args -p {app.pid}` and "
            f"`cat /proc/{app.pid}/cgroup` (a docker id there: `docker ps`); stop it "
            f"(`docker stop <container>` or `kill {app.pid}`), or add its name to {ALLOW_KEY}",
        )
        for app in apps
        if not _allowed(app.name, allowed)
    ]


def _allowed(name: str, allowed: Sequence[str]) -> bool:
    base = name.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(base, g) for g in allowed)


def _held(app: GpuProcess) -> str:
    return "an unknown amount of memory" if app.used_mib is None else f"{app.used_mib} MiB"


class MemorySource(enum.Enum):
    """Where a node's free GPU memory must be read."""

    DEVICE = "nvidia-smi memory.free"
    MEMINFO = "/proc/meminfo MemAvailable (unified memory: nvidia-smi reports none)"


def memory_source(gpus: Sequence[Gpu]) -> MemorySource:
    """MEMINFO when any GPU reports no memory of its own (GB10: "[N/A]", "Not Supported")."""
    unified = any(g.memory_total_mib is None for g in gpus)
    return MemorySource.MEMINFO if unified else MemorySource.DEVICE


def check_page_cache(
    engine_free_bytes: int, mem_available_bytes: int, gap_gib: float = 10.0
) -> list[Problem]:
    """On unified memory, the engine's own free figure (`torch.cuda.mem_get_info`, which vLLM
    admits on) is not far below MemAvailable: page cache counts there as used (vllm #35313)."""
    gap = mem_available_bytes - engine_free_bytes
    if gap < gap_gib * GIB:
        return []
    return [
        Problem(
            found=f"torch.cuda.mem_get_info free {engine_free_bytes / GIB:.1f} GiB, "
            f"{gap / GIB:.1f} GiB below MemAvailable {mem_available_bytes / GIB:.1f} GiB",
            planned=f"the engine sees within {gap_gib:g} GiB of MemAvailable ({GAP_KEY})",
            remedy="drop the page cache before launch, as root: "
            "`sync; echo 3 > /proc/sys/vm/drop_caches` (or lower --gpu-memory-utilization)",
        )
    ]
