"""Memory pressure before a launch: swap (zram included) and the kernel's pressure stall
information (PSI, https://docs.kernel.org/accounting/psi.html). On unified memory swap in use,
or tasks already stalling on memory, mean the engine will push the node into an out-of-memory
that freezes the whole box (docs/checks.md#memory-pressure).
"""

from __future__ import annotations

from dataclasses import dataclass

from infergate.checks.memory import gib
from infergate.problems import Problem

# systemd's memory-pressure watch fires on "some" stalls of 200 ms in 2 s, i.e. 10 %
# (https://github.com/systemd/systemd/blob/main/src/basic/psi-util.h)
PSI_SOME_AVG10_MAX = 10.0


@dataclass(frozen=True)
class SwapArea:
    """A swap area: `kind` is partition or file, its size and use are in bytes."""

    name: str
    kind: str
    size: int
    used: int

    @property
    def zram(self) -> bool:
        return "zram" in self.name


@dataclass(frozen=True)
class MemoryPressure:
    """The swap areas, and PSI's `some avg10` (None: no PSI on this kernel, or CONFIG_PSI off)."""

    swaps: tuple[SwapArea, ...]
    psi_some_avg10: float | None

    @property
    def swap_used(self) -> int:
        return sum(s.used for s in self.swaps)


def parse_proc_swaps(text: str) -> tuple[SwapArea, ...]:
    """Parse `cat /proc/swaps` (sizes in KiB); no swap prints the header alone.

    Sample lines: ``/mnt/swapfile  file  511996  160952  -2``, ``/dev/zram0  partition
    357856  0  100``
    """
    areas = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 4 and parts[2].isdigit() and parts[3].isdigit():
            areas.append(SwapArea(parts[0], parts[1], int(parts[2]) * 1024, int(parts[3]) * 1024))
    return tuple(areas)


def parse_psi_memory(text: str) -> float:
    """The `some avg10` of `cat /proc/pressure/memory`: the share of the last 10 s in which at
    least one task stalled on memory, in percent.

    Sample line: ``some avg10=0.22 avg60=0.17 avg300=1.11 total=58761459``
    """
    for line in text.splitlines():
        kind, *fields = line.split()
        if kind == "some":
            values = dict(field.split("=", 1) for field in fields)
            return float(values["avg10"])
    raise ValueError(f"no `some` line in /proc/pressure/memory: {text.strip()[:200]!r}")


def describe(pressure: MemoryPressure) -> str:
    """One cell of the per-node summary: swap in use (zram named), and PSI some avg10."""
    if not pressure.swaps:
        swap = "no swap"
    else:
        zram = " (zram)" if all(s.zram for s in pressure.swaps) else ""
        total = sum(s.size for s in pressure.swaps)
        swap = f"swap {gib(pressure.swap_used)} of {gib(total)}{zram}"
    psi = "n/a" if pressure.psi_some_avg10 is None else f"{pressure.psi_some_avg10:.2f}%"
    return f"{swap}, psi {psi}"


def check_memory_pressure(
    pressure: MemoryPressure, psi_max: float = PSI_SOME_AVG10_MAX
) -> list[Problem]:
    """On unified memory: no swap in use and memory stalls (PSI some avg10) at or below
    `psi_max` percent before the launch."""
    problems = []
    if pressure.swap_used:
        used = ", ".join(f"{s.name} {gib(s.used)}" for s in pressure.swaps if s.used)
        problems.append(
            Problem(
                found=f"swap in use on unified memory: {used}",
                planned="no swap in use before the launch (GPU and CPU share the memory)",
                remedy="something already holds more than the memory: find it with "
                "`ps -eo pid,rss,comm --sort=-rss | head` and stop it, then bring the pages "
                "back with `sudo swapoff -a && sudo swapon -a`",
            )
        )
    if pressure.psi_some_avg10 is not None and pressure.psi_some_avg10 > psi_max:
        problems.append(
            Problem(
                found=f"memory pressure: tasks stalled on memory {pressure.psi_some_avg10:.2f}% "
                "of the last 10 s (/proc/pressure/memory some avg10)",
                planned=f"at most {psi_max:g}% (systemd's memory-pressure threshold)",
                remedy="the node is reclaiming before the launch: `ps -eo pid,rss,comm "
                "--sort=-rss | head` and `docker stats --no-stream`; stop leftovers, then "
                "`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`",
            )
        )
    return problems
