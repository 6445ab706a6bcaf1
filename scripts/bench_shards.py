"""The host-level preflight sharded over xdist workers (`--shard-by plan`) against one
process, on the lab with sshd alone on each node (`up --sshd-only`), at 16, 64 and 244 nodes.

    flock /tmp/infergate-lab.lock .venv/bin/python scripts/bench_shards.py \
        [--nodes 16 64 244] [--repeats 1]

For each size, one warm-up run in one process, then REPEATS runs of each mode, side by side:
one process, 2 workers and 4 workers (local ones: `-n W --shard-by plan`). Each run is the
host-level preflight bench_scale times but the full-mesh ping (MESH), its red tests judged by
bench_scale.expected_reds (a run with another red is printed with it, not hidden), with its
wall; the CPU of pytest with its workers and ssh clients (all), of the SSH masters and of the
nodes' cgroups; and each process's own CPU with its ssh clients', which each writes at its
session's end (this module, loaded with `-p bench_shards`): the controller's (xdist's, its
workers not counted) and the busiest worker's, what one host of a sharded run carries. Here
the workers share this machine's two cores with each other and with the nodes. The lab is
left with 2 nodes and Docker.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from bench_preflight import LAB_INVENTORY, by_size_main, lab_up, preflight_argv
from bench_scale import expected_reds
from bench_timing import report_dir_option
from profile_preflight import grown, masters_cpu, node_cgroups, nodes_cpu

from infergate.plan.loader import load_plan

ROOT = Path(__file__).resolve().parents[1]
# the full-mesh ping: N x (N-1) pings on the nodes, which at 244 lab nodes overload this
# machine's two cores until a node's ping command outlives its deadline; the same in every mode
MESH = "test_fabric_peers_answer_ping"
CPU_ENV = "BENCH_SHARDS_CPU"  # the folder each process of the run under study writes into
MODES = {
    "one process": (),
    "2 workers": ("-n", "2", "--shard-by", "plan"),
    "4 workers": ("-n", "4", "--shard-by", "plan"),
}

# ---- inside the pytest under study (loaded with `-p bench_shards`) --------------------------


def pytest_sessionfinish(session: pytest.Session) -> None:
    """This process's CPU, and its ssh clients' (an xdist controller's children are its
    workers: not counted)."""
    folder = os.environ.get(CPU_ENV)
    if not folder:
        return
    who = getattr(session.config, "workerinput", {}).get("workerid", "controller")
    own, kids = (resource.getrusage(r) for r in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    cpu = own.ru_utime + own.ru_stime
    if who != "controller" or session.config.getoption("dist", "no") == "no":
        cpu += kids.ru_utime + kids.ru_stime
    Path(folder, f"{who}.json").write_text(json.dumps({"cpu": cpu}))


# ---- the bench ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    wall: float
    total_cpu: float  # pytest, its workers and their ssh clients
    controller: float  # the one process, or xdist's controller (its workers not counted)
    busiest: float  # the most CPU one worker used (the one process: its controller)
    masters: float
    nodes: float
    red: str  # the red tests by reason, all expected; else the first that was not


def run(mode: str, nodes: int, cgroups: list[Path]) -> Run:
    argv = [*preflight_argv(*MODES[mode], "-k", f"not {MESH}"), "-p", "bench_shards"]
    paths = [str(ROOT / "scripts"), *filter(None, [os.environ.get("PYTHONPATH")])]
    with tempfile.TemporaryDirectory() as cpu, report_dir_option() as reports:
        env = {**os.environ, CPU_ENV: cpu, "PYTHONPATH": os.pathsep.join(paths)}
        before_nodes, before_masters = nodes_cpu(cgroups), masters_cpu()
        started = time.monotonic()
        proc = subprocess.Popen(
            [*argv, reports], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert proc.stdout
        output = proc.stdout.read().decode()
        _, status, usage = os.wait4(proc.pid, 0)  # its CPU, its workers' and ssh clients'
        wall = time.monotonic() - started
        said = {p.stem: json.loads(p.read_text()) for p in Path(cpu).glob("*.json")}
    # xdist's loadgroup names a test with its group: test_x[node1]@shard-0
    plain = re.sub(r"\]@[\w-]+", "]", output)
    try:
        red = str(expected_reds(os.waitstatus_to_exitcode(status), plain, nodes))
    except ValueError as e:
        red = f"UNEXPECTED: {str(e)[:400]!r}"  # kept, not hidden: an overloaded lab says so
    controller = said.get("controller", {}).get("cpu", 0.0)
    workers = [s["cpu"] for who, s in said.items() if who != "controller"]
    found = Run(
        wall,
        usage.ru_utime + usage.ru_stime,
        controller,
        max(workers or [controller]),
        grown(before_masters, masters_cpu()),
        nodes_cpu(cgroups) - before_nodes,
        red,
    )
    print(row(nodes, mode, found), flush=True)  # as it comes: a later size may not finish
    return found


def row(nodes: int, mode: str, run: Run) -> str:
    return (
        f"| {nodes} | {mode} | {run.wall:.2f} | {run.total_cpu:.2f} | {run.controller:.2f} "
        f"| {run.busiest:.2f} "
        f"| {run.masters:.2f} | {run.nodes:.2f} | {run.red} |"
    )


HEADER = (
    "| nodes | mode | wall s | all CPU s | controller CPU s | busiest worker CPU s "
    "| masters CPU s | nodes CPU s | red |\n|---|---|---|---|---|---|---|---|---|"
)


def measure(nodes: int, repeats: int) -> dict[str, list[Run]]:
    lab_up(nodes, "--sshd-only")
    cgroups = node_cgroups([n.name for n in load_plan(Path(LAB_INVENTORY)).nodes])
    run("one process", nodes, cgroups)  # warm-up: the SSH masters, the page cache
    runs: dict[str, list[Run]] = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode in MODES:
            runs[mode].append(run(mode, nodes, cgroups))
    return runs


def report(sizes: list[int], measured: list[dict[str, list[Run]]]) -> None:
    """The run of median wall of each mode at each size."""
    print(HEADER)
    for nodes, runs in zip(sizes, measured, strict=True):
        for mode, done in runs.items():
            print(row(nodes, mode, sorted(done, key=lambda r: r.wall)[len(done) // 2]))


def main() -> None:
    sizes: list[int] = []

    def sized(nodes: int, repeats: int) -> dict[str, list[Run]]:
        sizes.append(nodes)
        return measure(nodes, repeats)

    by_size_main(__doc__ or "", [16, 64, 244], sized, lambda found: report(sizes, found))


if __name__ == "__main__":
    main()
