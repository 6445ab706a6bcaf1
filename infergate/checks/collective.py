"""The collective sweep: all-reduce from 8 B up to the plan's largest size, read from the
in-image probe's lines (scripts/in_image.py) or from nccl-tests' table (all_reduce_perf,
all_gather_perf). Judged for a correct sum (nccl-tests' #wrong) and for busbw at the largest
size against the floor, with the small sizes' latency in the message. The Spark pair's floor
and its calibration: docs/checks.md#collective-sweep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infergate.checks.nccl import BANDWIDTH_REMEDY, FLOOR_KEY
from infergate.plan.model import plan_key
from infergate.problems import Problem

MAX_KEY = plan_key("fabric.collective_max_mib")
# sizes up to this are where latency, not bandwidth, is read (tensor-parallel decode's)
LATENCY_MAX_BYTES = 64 * 2**10

# NVIDIA's floor for a Spark pair: MIN_NCCL_TEST_BW in NVIDIA/dgx-spark-playbooks
# spark_cluster_setup.py, measured by `all_gather_perf -b 16G -e 16G`
VENDOR_BUSBW_GBPS = 21.875
VENDOR_BYTES = 16 * 2**30
# a 2-Spark all_reduce_perf's 8 KiB time, the per-operation overhead (alpha):
# https://github.com/NVIDIA/dgx-spark-playbooks/pull/103 (selftest/data/nccl-tests/)
SPARK_ALPHA_US = 35.15


@dataclass(frozen=True)
class Size:
    """One size of a sweep as nccl-tests reports it: time in µs, algbw = bytes/time, busbw =
    algbw * 2(n-1)/n for all-reduce, (n-1)/n for all-gather; wrong: elements not as expected
    (None: not checked, nccl-tests' N/A under -c 0)."""

    nbytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None


@dataclass(frozen=True)
class Sweep:
    """A sweep's sizes, rising; STOPPED says why it ended before its largest planned size."""

    collective: str  # "nccl all-reduce", "gloo all-reduce", or nccl-tests' binary name
    world: int
    sizes: tuple[Size, ...]
    stopped: str = ""


_SWEEP_LINE = re.compile(
    r"backend=(\w+) world=(\d+) bytes=(\d+) iters=\d+ time_us=([\d.]+) "
    r"algbw_GBps=([\d.]+) busbw_GBps=([\d.]+) wrong=(\d+)"
)


def parse_sweep_lines(lines: list[str]) -> Sweep | None:
    """The in-image probe's `sweep` lines, one per size, e.g. ``backend=nccl world=2
    bytes=1073741824 iters=5 time_us=3321.5 algbw_GBps=323.3 busbw_GBps=323.3 wrong=0``;
    a last ``sweep stopped before bytes=N: 20.0 s budget`` names a sweep cut short."""
    rows = [m for m in map(_SWEEP_LINE.search, lines) if m]
    stopped = next((line for line in lines if line.startswith("sweep stopped")), "")
    if not rows:
        return Sweep("all-reduce", 0, (), stopped) if stopped else None
    sizes = tuple(Size(int(m[3]), float(m[4]), float(m[5]), float(m[6]), int(m[7])) for m in rows)
    return Sweep(f"{rows[0][1]} all-reduce", int(rows[0][2]), sizes, stopped)


_NCCL_TESTS_ROW = re.compile(
    r"^\s*(\d+)\s+\d+\s+\w+\s+\w+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)\s+"
    r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)\s*$"
)


def parse_nccl_tests(text: str, in_place: bool = False) -> Sweep | None:
    """nccl-tests' table (`all_reduce_perf -b 8 -e 1G -f 2`): its out-of-place columns, or
    with IN_PLACE its in-place ones. World: its `#  Rank  N ...` lines. Sample row:
    ``8192  2048  float  sum  -1  35.15  0.23  0.23  0  30.33  0.27  0.27  0``."""
    rows = [m for m in map(_NCCL_TESTS_ROW.match, text.splitlines()) if m]
    if not rows:
        return None
    first = 6 if in_place else 2
    sizes = tuple(_row(m, first) for m in rows)
    name = re.search(r"Collective test starting: (\w+)", text)
    world = len(re.findall(r"^#\s+Rank\s+\d+ ", text, re.MULTILINE))
    return Sweep(name[1] if name else "nccl-tests", world, sizes)


def _row(match: re.Match[str], first: int) -> Size:
    time_us, algbw, busbw, wrong = match.group(first, first + 1, first + 2, first + 3)
    return Size(int(match[1]), float(time_us), float(algbw), float(busbw), _wrong(wrong))


def _wrong(text: str) -> int | None:
    return None if text == "N/A" else int(text)


def check_sweep_correct(sweep: Sweep | None) -> list[Problem]:
    """Every size summed right: each rank's tensor holds rank+1, so every element of the
    sum is n(n+1)/2 (nccl-tests' #wrong counts those that are not)."""
    if sweep is None or not sweep.sizes:
        return [
            Problem(
                found="no size of the all-reduce sweep ran: "
                + (sweep.stopped if sweep else "the probe printed no sweep line"),
                planned="one all-reduce line per size, 8 B to the largest",
                remedy="raise thresholds.rendezvous_timeout_s: the sweep starts no size within "
                "5 s of it, and the Gloo rendezvous took the rest",
            )
        ]
    bad = [s for s in sweep.sizes if s.wrong]
    unchecked = [s for s in sweep.sizes if s.wrong is None]
    if not bad and not unchecked:
        return []
    if bad:
        found = ", ".join(f"{s.wrong} wrong at {_size(s.nbytes)}" for s in bad)
        remedy = (
            "a wrong sum is corrupted data, not a slow link: look for Xid and PCIe AER errors "
            "(`dmesg`) and ECC errors (`nvidia-smi -q -d ECC`) on this node, then rerun with "
            "NCCL_PROTO=Simple to see whether one protocol corrupts it"
        )
    else:
        found = f"no check made at {', '.join(_size(s.nbytes) for s in unchecked)} (N/A)"
        remedy = "run the sweep with its check on (nccl-tests: -c 1, its default)"
    return [
        Problem(
            found=f"{sweep.collective} across {sweep.world} ranks: {found}",
            planned="every element of every size equal to the sum of the ranks' values (#wrong 0)",
            remedy=remedy,
        )
    ]


def check_sweep_bandwidth(sweep: Sweep | None, floor: float, planned_bytes: int) -> list[Problem]:
    """busbw at the sweep's largest size, which must be the planned one, reaches the floor;
    the message carries the small sizes' latency."""
    largest = sweep.sizes[-1] if sweep and sweep.sizes else None
    if sweep and largest and largest.nbytes >= planned_bytes and largest.busbw_gbps >= floor:
        return []
    if sweep is None or largest is None:
        found = "no sweep line: the collective did not complete"
        found += f" ({sweep.stopped})" if sweep else ""
    else:
        found = (
            f"{sweep.collective} busbw {largest.busbw_gbps:g} GB/s at {_size(largest.nbytes)} "
            f"({largest.time_us:g} µs, {sweep.world} ranks); latency {latency(sweep)}"
        )
        if largest.nbytes < planned_bytes:
            found += f"; {sweep.stopped or 'the sweep ended early'}"
    return [
        Problem(
            found=found,
            planned=f"at least {floor:g} GB/s busbw at {_size(planned_bytes)} ({FLOOR_KEY}, "
            f"{MAX_KEY})",
            remedy=BANDWIDTH_REMEDY,
        )
    ]


def latency(sweep: Sweep) -> str:
    """The small sizes' times, e.g. ``8 B 35 µs, 64 B 36 µs, 512 B 37 µs``."""
    small = [s for s in sweep.sizes if s.nbytes <= LATENCY_MAX_BYTES] or list(sweep.sizes[:1])
    return ", ".join(f"{_size(s.nbytes)} {s.time_us:g} µs" for s in small)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def spark_pair_floor(nbytes: int) -> float:
    """The vendor's Spark-pair busbw floor carried to a 2-rank all-reduce of NBYTES: busbw
    is the link's rate for both collectives (nccl-tests doc/PERFORMANCE.md), and time is
    overhead + bytes/rate, so a smaller size reads lower by rate*alpha/(bytes + rate*alpha)."""
    rate = VENDOR_BUSBW_GBPS * 1e3  # bytes per µs
    return VENDOR_BUSBW_GBPS * nbytes / (nbytes + rate * SPARK_ALPHA_US)
