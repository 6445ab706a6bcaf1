"""The host-level preflight at scale: wall and CPU of the controller and of the nodes on the
lab with sshd alone on each node (`up --sshd-only`) at 2, 16, 64 and 128 nodes, and a
projection to 256 and 1,024 nodes from the controller's cost per node.

    flock /tmp/infergate-lab.lock .venv/bin/python scripts/bench_scale.py \
        [--nodes 2 16 64 128] [--repeats 3]

For each size: `up -n N --sshd-only` (timed), one warm-up run, then REPEATS runs of the
preflight as bench_preflight runs it (profile_preflight.run_preflight: its wall and the CPU
of pytest with its ssh clients, of the SSH masters and of the nodes' cgroups); the run of
median wall is kept. With no dockerd, test_docker_engine_answers is red on every node, and
from 64 nodes a few nodes' ping tests may be red for pings lost in the lab's overload: each
run may have those red and nothing else (expected_reds; any other failure, error or crash
stops the bench with the run's output), and the table counts both. While the
runs go, the ssh clients in flight under pytest and pytest's open file descriptors are
sampled every 50 ms. The lab is left with 2 nodes and Docker.

The projection: a least-squares line through the controller's CPU seconds (pytest, its ssh
clients, the masters) against the node count. The lab's nodes share this machine's cores
with the controller; real nodes run their own probes, so there the wall is bounded below by
the controller's CPU over its cores, and by the fan-out: FAN_OUT_CAP commands in flight, each
taking about what it takes on the 2-node lab, whose nodes are not short of CPU.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import resource
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench_preflight import LAB_INVENTORY, by_size_main, lab_up
from profile_preflight import Run, masters_cpu, node_cgroups, run_preflight

from infergate.plan.loader import load_plan
from infergate.remote.fanout import FAN_OUT_CAP

PROJECTED = (256, 1024)
ENGINE_RED = re.compile(r"test_docker_engine_answers\[(node\d+)\]")
ENGINE_DOWN = "no engine answered: Cannot connect to the Docker daemon"
PING_RED = re.compile(r"test_fabric_peers_answer_ping\[node\d+\]")
PING_LOST = re.compile(r"  - found node\d+ \(\S+\) answered [01] of 2 pings over ")
NO_ENGINE, LOST = "no dockerd", "pings lost"
_SECTION = re.compile(r"^_{3,} (\S+) _{3,}$", re.MULTILINE)
_SUMMARY = re.compile(r"^=* ?(?P<counts>\d+ \w+.*) in [\d.]+s", re.MULTILINE)


def expected_reds(returncode: int, output: str, nodes: int) -> dict[str, int]:
    """The red tests of a run against the sshd-only lab, by reason, if each is one of two:
    the Docker engine's test of a node saying its engine did not answer (every node, once),
    or a node's ping test whose every problem is a peer that lost pings (the lab's cores
    running every node's pings at once: a ping not scheduled within its second is lost).
    Nothing else may fail; ValueError naming the first that did."""
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (\w+)", _summary(output))}
    if returncode != 1 or set(counts) - {"passed", "failed", "skipped", "deselected"}:
        raise ValueError(f"exit status {returncode}, {counts}: not only failed tests")
    engines, lost = [], 0
    headers = list(_SECTION.finditer(output))
    for header, after in zip(headers, [*headers[1:], None], strict=True):
        body = output[header.end() : after.start() if after else None].split("\n=")[0]
        problems = [li for li in body.splitlines() if li.startswith("  - ")]
        if (red := ENGINE_RED.fullmatch(header.group(1))) and ENGINE_DOWN in body:
            engines.append(red.group(1))
        elif PING_RED.fullmatch(header.group(1)) and all(map(PING_LOST.match, problems)):
            lost += 1
        else:
            raise ValueError(f"{header.group(1)} red for another reason: {body[:500]!r}")
    expected = [f"node{i}" for i in range(1, nodes + 1)]
    if sorted(engines) != sorted(expected) or counts.get("failed") != nodes + lost:
        raise ValueError(f"red: {len(headers)} sections, {counts}; expected one per node")
    return {NO_ENGINE: nodes, LOST: lost}


def _summary(output: str) -> str:
    found = _SUMMARY.findall(output)
    if not found:
        raise ValueError("no summary line: the run did not finish")
    return str(found[-1])


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    with contextlib.suppress(OSError):  # ended meanwhile
        for task in Path(f"/proc/{pid}/task").iterdir():
            kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def _comm(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return ""


@dataclass
class Peaks:
    """The most ssh clients in flight under this process's pytest, and the most file
    descriptors that pytest held, over the samples taken."""

    ssh: int = 0
    fds: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        for pytest in _children(os.getpid()):
            with contextlib.suppress(OSError):
                self.fds = max(self.fds, len(os.listdir(f"/proc/{pytest}/fd")))
            self.ssh = max(self.ssh, sum(_comm(k) == "ssh" for k in _children(pytest)))
        self.samples += 1

    @contextlib.contextmanager
    def watching(self, every_s: float = 0.05) -> Iterator[None]:
        def loop() -> None:
            while not self._stop.wait(every_s):
                self.sample()

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join()
            self._stop.clear()


@dataclass(frozen=True)
class Size:
    nodes: int
    up_s: float
    runs: list[Run]  # by wall
    peaks: Peaks
    masters: int
    masters_mib: float
    memory_gib: float  # the machine's in use, the lab up and the masters open

    @property
    def median(self) -> Run:
        return self.runs[len(self.runs) // 2]

    @property
    def controller_cpu(self) -> float:
        cpu = self.median.cpu
        return cpu["controller: pytest and its ssh clients"] + cpu["controller: the SSH masters"]

    @property
    def nodes_cpu(self) -> float:
        return self.median.cpu["nodes: sshd, sessions, probe, dockerd"]


def masters_memory_mib() -> tuple[int, float]:
    """How many SSH masters there are, and their memory together (MiB): each one's
    proportional set size, its shared libraries' pages divided among the processes that map
    them (RSS would count those pages once per master)."""
    pids = list(masters_cpu())
    kib = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            kib += int(next(li for li in rollup.splitlines() if li.startswith("Pss:")).split()[1])
    return len(pids), kib / 1024


def memory_in_use_gib() -> float:
    """The machine's memory in use: MemTotal less MemAvailable (what `free` calls available)."""
    info = dict(li.split(":") for li in Path("/proc/meminfo").read_text().splitlines())
    kib = int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])
    return kib / 2**20


def measure(nodes: int, repeats: int) -> Size:
    start = time.monotonic()
    lab_up(nodes, "--sshd-only")
    up_s = time.monotonic() - start
    cgroups = node_cgroups([n.name for n in load_plan(Path(LAB_INVENTORY)).nodes])

    def judge(returncode: int, output: str) -> dict[str, int]:
        return expected_reds(returncode, output, nodes)

    run_preflight(cgroups, judge=judge)  # warm-up: the SSH masters, the page cache
    peaks = Peaks()
    with peaks.watching():
        runs = [run_preflight(cgroups, judge=judge) for _ in range(repeats)]
    count, mib = masters_memory_mib()
    by_wall = sorted(runs, key=lambda r: r.wall)
    return Size(nodes, up_s, by_wall, peaks, count, mib, memory_in_use_gib())


def report(sizes: list[Size]) -> None:
    cores = os.cpu_count() or 1
    print(
        "\n| nodes | `up` s | wall s, median (min-max) | tests (red: no dockerd, pings lost) | "
        "controller CPU s | of it masters | nodes CPU s | per node | ssh in flight | "
        "pytest fds | masters MiB | memory in use GiB |"
    )
    print("|---" * 12 + "|")
    for s in sizes:
        m, walls = s.median, [r.wall for r in s.runs]
        masters = m.cpu["controller: the SSH masters"]
        print(
            f"| {s.nodes} | {s.up_s:.0f} | {m.wall:.2f} ({min(walls):.2f}-{max(walls):.2f}) | "
            f"{m.items} ({m.red[NO_ENGINE]}, {m.red[LOST]}) | "
            f"{s.controller_cpu:.2f} | {masters:.2f} | "
            f"{s.nodes_cpu:.2f} | {s.nodes_cpu / s.nodes * 1000:.0f} ms | {s.peaks.ssh} | "
            f"{s.peaks.fds} | {s.masters_mib:.0f} ({s.masters}) | "
            f"{s.memory_gib:.1f} |"
        )
    print("\nper added node, between sizes (ms): wall, controller CPU, nodes CPU")
    for a, b in itertools.pairwise(sizes):
        added = (b.nodes - a.nodes) / 1000
        print(
            f"  {a.nodes} -> {b.nodes}: {(b.median.wall - a.median.wall) / added:.0f}, "
            f"{(b.controller_cpu - a.controller_cpu) / added:.0f}, "
            f"{(b.nodes_cpu - a.nodes_cpu) / added:.0f}"
        )
    if len(sizes) > 1:
        project(sizes, cores)


def project(sizes: list[Size], cores: int) -> None:
    """The controller's CPU by a linear fit, and from the largest size on at the cost per
    node of its last step (the cost per node grows with the nodes: each node's pings and
    their results grow with its peers); the wall on real nodes by its two bounds."""
    nodes, cpus = [s.nodes for s in sizes], [s.controller_cpu for s in sizes]
    fit = statistics.linear_regression(nodes, cpus)
    step = (cpus[-1] - cpus[-2]) / (nodes[-1] - nodes[-2])
    small = sizes[0].median.parts
    ssh = sum(v for k, v in small.items() if "fan-out" in k or "SSH" in k)
    fixed = sum(small.values()) - ssh
    per_master = sizes[-1].masters_mib / max(1, sizes[-1].masters)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(
        f"\ncontroller CPU = {fit.intercept:.2f} s + {fit.slope * 1000:.1f} ms x nodes "
        f"(least squares over {', '.join(map(str, nodes))} nodes); the last step's "
        f"{step * 1000:.1f} ms per node from {nodes[-1]} on"
    )
    print(
        f"on real nodes: fixed {fixed:.2f} s + SSH waits {ssh:.2f} s per round of "
        f"{FAN_OUT_CAP} in flight (the {nodes[0]}-node run's); ulimit -n {soft}"
    )
    print(
        f"| nodes | controller CPU s: fit / last step | wall bound by its CPU on {cores} "
        "cores | on 16 cores | by the fan-out | masters MiB |"
    )
    print("|---" * 6 + "|")
    for n in PROJECTED:
        low, high = fit.intercept + fit.slope * n, cpus[-1] + step * (n - nodes[-1])
        rounds = fixed + ssh * math.ceil(n / FAN_OUT_CAP)
        print(
            f"| {n} | {low:.1f} / {high:.1f} | {low / cores:.1f} / {high / cores:.1f} | "
            f"{low / 16:.1f} / {high / 16:.1f} | {rounds:.1f} | "
            f"{per_master * n:.0f} |"
        )


def main() -> None:
    by_size_main(__doc__ or "", [2, 16, 64, 128], measure, report)


if __name__ == "__main__":
    main()
