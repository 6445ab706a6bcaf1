"""Issue 16's table in one run: every figure measured here, now, beside its goal, PASS or MISS.

    flock /tmp/infergate-lab.lock .venv/bin/python scripts/bench.py \
        [--repeats 3] [--gib 2] [--files 4]

Runs, one after the other in this process, the three benches the figures come from, each as
its own script measures (their docstrings say how): bench_preflight_image.py (the bare
import of the engine and the full preflight with `--in-image fresh`; needs the lab's engine),
bench_model_hash.py (full-tier SHA-256 against the node's limit, cold and warm, on node1),
bench_preflight.py (the host-level preflight at 2 and 16 nodes, one process, `-n auto` and `-n 2`),
bench_scale.py at 2 and 16 nodes (the controller's CPU for the same preflight, on the lab with
sshd alone on each node: the lab's nodes share this machine's cores, so the wall ratio above
is mostly theirs; the controller's is what a cluster of real nodes would cost it). The lab is
left with 2 nodes and Docker. Medians of REPEATS rounds; a ratio is one of medians. About 3.5
minutes with the defaults on a 2-core machine, 4 to 5.5 with `--repeats 5`.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import bench_model_hash
import bench_preflight
import bench_preflight_image
import bench_scale
from bench_model_hash import Hashing
from bench_preflight import SIZES, Times

from infergate.checks.model_hash import GB

ISAS = ("avx2", "avx512f")  # what the engine's CPU kernels are built for


@dataclass(frozen=True)
class Goal:
    """A bound the figure must keep (at most, or at least), or none: the row is reported."""

    text: str
    met: Callable[[float], bool] | None = None

    def verdict(self, value: float) -> str:
        if self.met is None:
            return "-"
        return "PASS" if self.met(value) else "MISS"


def at_most(bound: float, text: str) -> Goal:
    return Goal(text, lambda v: v <= bound)


def at_least(bound: float, text: str) -> Goal:
    return Goal(text, lambda v: v >= bound)


REPORTED = Goal("reported")


def no_slower(rounds: list[float]) -> Goal:
    """No slower than one process beyond the noise of this run: the one-process ROUNDS'
    own spread, (max - min) / median. Below 141 nodes on 2 cores `-n auto` is one process
    (fixtures/plugin.py auto_workers), so its ratio to one process is the machine's noise; a
    `-n auto` that started workers again would cost 1.5x to 2.2x here (docs/performance.md)."""
    bound = 1.0 + (max(rounds) - min(rounds)) / statistics.median(rounds)
    return at_most(bound, f"<= 1.0x + one process's spread ({bound:.2f}x)")


@dataclass(frozen=True)
class Row:
    what: str
    measured: str
    value: float  # the figure the goal judges
    goal: Goal


def seconds_row(what: str, values: list[float], goal: Goal) -> Row:
    median = statistics.median(values)
    return Row(what, f"{median:.2f} s", median, goal)


def ratio_row(what: str, top: list[float], bottom: list[float], goal: Goal) -> Row:
    t, b = statistics.median(top), statistics.median(bottom)
    return Row(what, f"{t:.2f} / {b:.2f} s = {t / b:.2f}x", t / b, goal)


def hash_row(what: str, rates: tuple[float, float, float, float], goal: Goal) -> Row:
    """The hash's rate against the limit, the lower of the read's and the cores' rates: RATES
    (bytes/s) in that order, all four shown."""
    rate, limit, read, cores = rates
    measured = (
        f"{rate / GB:.2f} / {limit / GB:.2f} GB/s = {rate / limit:.2f}x "
        f"(limit: read {read / GB:.2f}, cores {cores / GB:.2f})"
    )
    return Row(what, measured, rate / limit, goal)


FRESH = "full preflight, `--in-image fresh` / bare `docker run IMAGE python3 -c 'import vllm'`"


CONTROLLER = "controller CPU (pytest, its ssh clients, the masters), 16 nodes / 2 nodes"
FORCED = "`-n 2` (two workers forced) / one process, 16 nodes"


def rows(
    preflight: dict[int, Times],
    controller: dict[int, float],
    h: Hashing,
    image: dict[str, list[float]],
) -> list[Row]:
    """The table's rows from what the benches measured, in the issue's order; CONTROLLER:
    the controller's CPU seconds by lab size, beside the wall ratio it explains."""
    one = {n: times["one process"] for n, times in preflight.items()}
    auto = {n: times["-n auto"] for n, times in preflight.items()}
    forced = {n: times["-n 2"] for n, times in preflight.items()}
    cold = (h.cold_hash, h.cold_limit, h.cold_read, h.cores_limit)
    warm = (h.size / h.warm_hash, h.warm_limit, h.size / h.warm_raw, h.cores_limit)
    return [
        seconds_row("host-level preflight, 2 nodes, one process", one[2], at_most(5.0, "<= 5 s")),
        ratio_row("16 nodes / 2 nodes, one process", one[16], one[2], at_most(1.5, "<= 1.5x")),
        ratio_row(CONTROLLER, [controller[16]], [controller[2]], at_most(1.5, "<= 1.5x")),
        ratio_row("`-n auto` / one process, 2 nodes", auto[2], one[2], no_slower(one[2])),
        ratio_row("`-n auto` / one process, 16 nodes", auto[16], one[16], no_slower(one[16])),
        ratio_row(FORCED, forced[16], one[16], REPORTED),
        hash_row("full SHA-256 / the limit, cold", cold, at_least(0.9, ">= 0.9x")),
        hash_row("the same, warm page cache", warm, REPORTED),
        ratio_row(FRESH, image["full, fresh"], image["bare"], at_most(1.5, "<= 1.5x")),
    ]


def table(table_rows: list[Row]) -> str:
    """The rows as a Markdown table, the verdict last."""
    lines = ["| what | measured | goal | met |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {r.what} | {r.measured} | {r.goal.text} | {r.goal.verdict(r.value)} |"
        for r in table_rows
    ]
    return "\n".join(lines)


def machine(cpuinfo: str, cores: int) -> str:
    """The machine as the figures depend on it: its cores and the ISAs of ISAS it has."""
    flags = next(
        (
            line.split(":", 1)[1].split()
            for line in cpuinfo.splitlines()
            if line.startswith("flags")
        ),
        [],
    )
    return f"{cores} cores, {' '.join(isa for isa in ISAS if isa in flags) or 'no avx2'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of each bench")
    parser.add_argument("--gib", type=float, default=2.0, help="the model-like directory's size")
    parser.add_argument("--files", type=int, default=4, help="its shards")
    args = parser.parse_args()
    fresh = {"full, fresh": bench_preflight_image.RUNS["full, fresh"]}
    image = bench_preflight_image.measure(args.repeats, fresh)
    hashing = bench_model_hash.measure("node1", args.gib, args.files, args.repeats)
    preflight = bench_preflight.measure(args.repeats)
    scaled = bench_preflight.over_sizes(SIZES, args.repeats, bench_scale.measure)
    controller = {size.nodes: size.controller_cpu for size in scaled}
    cpu = machine(Path("/proc/cpuinfo").read_text(), os.cpu_count() or 1)
    print(
        f"\nmedians of {args.repeats}; model hash: {args.files} files, {args.gib:g} GiB, "
        f"on node1; this machine: {cpu}\n"
    )
    print(table(rows(preflight, controller, hashing, image)))


if __name__ == "__main__":
    main()
