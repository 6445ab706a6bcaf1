"""The memory guard's samples: one long shell loop per node printing MemTotal, MemAvailable,
the memory cgroup walk and PSI about once a second, parsed tick by tick, and the judge of a
tick against the plan's floor (docs/memory-guard.md).

The loop forks only `sleep` (everything else is the shell's `read`), and ends at its first
write after the controller's ssh is gone (SIGPIPE): nothing is left on the node. On a node
with GPUs, a second loop runs nvidia-smi every interval for the GPUs' telemetry, and ends
when the first is gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from infergate.checks.gpu import MemorySource, memory_source, parse_nvidia_smi_query_gpu
from infergate.checks.gpu_load import LOAD_FIELDS, parse_gpu_samples
from infergate.checks.gpu_load import Sample as GpuSample
from infergate.checks.memory import GIB, gib, memory_facts
from infergate.checks.probe import CGROUP_MEMORY
from infergate.plan.model import Guard, plan_key
from infergate.problems import Problem

FLOOR_KEY = plan_key("guard.memory_floor_gib")
MODE_KEY = plan_key("guard.memory")
TICK = "@@@ tick"  # a tick's first line: `@@@ tick <the node's uptime in s>`
END = "@@@ end"  # and its last
GPUS = "@@@ gpus"  # once, first: each GPU's memory.total ("[N/A]" on unified memory)
GPU_ROW = "@@@ gpu"  # `@@@ gpu <uptime>, <a row of TELEMETRY_FIELDS>`, beside the ticks
TELEMETRY_FIELDS = (*LOAD_FIELDS, "memory.used")  # the GPU load's, and the memory in use
# the form of a recorded GB10 answer (selftest/data/gb10/query-gpu-index-name-memory.csv)
_GPU_FIELDS = ("index", "name", "memory.total", "memory.used", "memory.free")


def sampler_script(interval_s: float) -> str:
    """The node's loop: the GPUs once, then a tick every INTERVAL_S; where the GPUs answered,
    a loop of their own beside it prints each GPU's row every INTERVAL_S (a hung nvidia-smi
    delays no tick), and ends once the ticks' shell is gone."""
    query = f"--query-gpu={','.join(_GPU_FIELDS)} --format=csv,noheader,nounits"
    rows = f"--query-gpu={','.join(TELEMETRY_FIELDS)} --format=csv,noheader,nounits"
    return f"""echo '{GPUS}'
if timeout 10 nvidia-smi {query} 2>/dev/null; then
  ticks=$$
  while kill -0 "$ticks" 2>/dev/null; do
    read -r up _ </proc/uptime
    timeout 5 nvidia-smi {rows} 2>/dev/null |
      while IFS= read -r l; do echo "{GPU_ROW} $up, $l"; done
    sleep {interval_s:g}
  done &
fi
while :; do
  read -r up _ </proc/uptime
  echo "{TICK} $up"
  while IFS= read -r l; do
    case $l in MemTotal:*|MemAvailable:*) echo "$l" ;; esac
  done </proc/meminfo
  if [ -r /proc/pressure/memory ]; then
    while IFS= read -r l; do echo "psi $l"; done </proc/pressure/memory
  fi
  {CGROUP_MEMORY.strip()}
  echo '{END}'
  sleep {interval_s:g}
done
"""


@dataclass(frozen=True)
class MemorySample:
    """One tick of a node: the node's uptime, MemTotal and MemAvailable, what the memory
    cgroup above the sampler leaves (`usable`, `bound` its path; "" when none binds), PSI."""

    t_s: float
    total: int
    available: int
    usable: int
    bound: str = ""
    psi_some: float | None = None  # avg10, percent; None: no PSI on this kernel
    psi_full: float | None = None


def parse_psi_avg10(text: str) -> tuple[float | None, float | None]:
    """`some` and `full` avg10 of /proc/pressure/memory (lines prefixed `psi ` or not).

    Sample line: ``some avg10=0.22 avg60=0.17 avg300=1.11 total=58761459``
    """
    found: dict[str, float] = {}
    for line in text.splitlines():
        kind, *fields = line.removeprefix("psi ").split()
        values = dict(f.split("=", 1) for f in fields if "=" in f)
        if kind in ("some", "full") and "avg10" in values:
            found[kind] = float(values["avg10"])
    return found.get("some"), found.get("full")


def parse_tick(header: str, body: str) -> MemorySample:
    """One tick: its header `@@@ tick 12345.67` and the lines up to `@@@ end`.

    Sample lines: ``MemAvailable:   118566368 kB``, ``psi full avg10=0.00 avg60=0.00
    avg300=0.00 total=0``, ``/infergate-lab/node2 6442450944 1048576000 52428800``
    """
    facts = memory_facts(body, body)  # meminfo and cgroup lines differ in form: one text
    cg = facts.tightest_cgroup
    bound = cg.path if cg is not None and facts.usable < facts.available else ""
    some, full = parse_psi_avg10(body)
    uptime = float(header.removeprefix(TICK).split()[0])
    return MemorySample(uptime, facts.total, facts.available, facts.usable, bound, some, full)


def parse_gpus(text: str) -> bool:
    """Whether the node's memory is unified (a GPU reporting no memory of its own, GB10);
    no nvidia-smi (nothing printed) is not.

    Sample line (GB10): ``0, NVIDIA GB10, [N/A], [N/A], [N/A]``
    """
    gpus = parse_nvidia_smi_query_gpu(text, _GPU_FIELDS) if text.strip() else []
    return bool(gpus) and memory_source(gpus) is MemorySource.MEMINFO


def ticks(lines: Iterable[str]) -> Iterator[bool | MemorySample | GpuSample]:
    """The sampler's output as it comes: first whether the node is unified memory, then a
    sample per tick, and a GPU's sample per row between; a tick cut short (the stream ended)
    or a line unreadable is dropped."""
    header, body, gpus, said = "", list[str](), list[str](), False
    for line in lines:
        if line == GPUS:
            continue
        row, tick = line.startswith(f"{GPU_ROW} "), line.startswith(TICK)
        if (row or tick) and not said:  # the GPUs' answer ends at the first of either
            said = True
            yield parse_gpus("\n".join(gpus))
        if row:
            with contextlib.suppress(ValueError):  # a row cut short by the session's end
                yield from parse_gpu_samples(line.removeprefix(GPU_ROW), TELEMETRY_FIELDS)
        elif tick:
            header, body = line, []
        elif line == END and header:
            with contextlib.suppress(ValueError):  # a tick without MemAvailable: skipped
                yield parse_tick(header, "\n".join(body))
        elif header:
            body.append(line)
        elif not said:
            gpus.append(line)


def enforced(guard: Guard, unified: bool) -> bool:
    """Whether a breach of the floor stops the run on a node: `on`, or `auto` on unified
    memory (the other nodes' curves are recorded all the same)."""
    return guard.memory == "on" or (guard.memory == "auto" and unified)


def describe_sample(s: MemorySample) -> str:
    """`MemAvailable 7.2 GiB of 121.7 GiB, PSI some 3.1 % full 0.4 % (avg10)`, with the
    cgroup that bounds it."""
    found = f"MemAvailable {gib(s.available)} of {gib(s.total)}"
    if s.bound:
        found = f"{gib(s.usable)} usable under cgroup {s.bound} ({found})"
    if s.psi_some is not None:
        full = f" full {s.psi_full:.1f} %" if s.psi_full is not None else ""
        found += f", PSI some {s.psi_some:.1f} %{full} (avg10)"
    return found


def check_memory_floor(sample: MemorySample, floor_gib: float) -> list[Problem]:
    """The node's usable memory (MemAvailable, bounded by its memory cgroup) is at least the
    plan's floor: below it, a unified-memory node freezes rather than OOM-kills."""
    if sample.usable >= floor_gib * GIB:
        return []
    return [
        Problem(
            found=describe_sample(sample),
            planned=f"at least {floor_gib:g} GiB available ({FLOOR_KEY})",
            remedy="this run's containers were removed; make the engine hold less (a lower "
            "--gpu-memory-utilization or --mem-fraction-static, a shorter --max-model-len, "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or stop what else grew (below)",
        )
    ]
