"""Where the host-level preflight's wall time and CPU go, on a 2-node and a 16-node lab:
pytest itself, the SSH fan-out, the probe on the node, parsing and judging, and the CPU
seconds of the controller and of the nodes.

    flock /tmp/infergate-lab.lock .venv/bin/python scripts/profile_preflight.py \
        [--nodes 2 16] [--repeats 3]

For each lab size, in one run (the lab is left with 2 nodes):
1. Each node alone, one after the other, through the suite's own ssh_config and Remote: a
   new master connection (TCP, key exchange, authentication), a session over it (`true`),
   and the host probe under /usr/bin/time on the node (its own wall and CPU seconds); then
   the probe's output parsed with parse_sections, as each fan-out thread does.
2. The preflight as bench_preflight runs it, warm (a run before opens the SSH masters),
   plain REPEATS times (the run of median wall is shown) and once under cProfile. This
   module, loaded into that pytest with `-p`, notes when start-up, collection, the tests and
   the session's end happen, and the wall of every fan-out (on_every_node) and of every
   other SSH command of the main thread. CPU: pytest's and its ssh clients' (wait4), the SSH
   masters' (/proc), and the nodes': every process in each node's cgroup (sshd and its
   sessions, dockerd), reaped children included. cProfile sees the main thread only (not the
   fan-out threads): the imports, and the cumulative time in infergate.checks (building the
   probe, reading the facts, judging).
3. Where PYTHONDONTWRITEBYTECODE is set (every run then compiles each module it imports and
   pytest rewrites each test module again), the plain runs again without it, their caches
   kept in a folder of their own (PYTHONPYCACHEPREFIX).
The lab's nodes share the controller's cores: the nodes' CPU is what real nodes would take
off the controller; the rest is the controller's own, per run and per node.
"""

from __future__ import annotations

import contextlib
import json
import os
import pstats
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench_preflight import LAB_INVENTORY, SIZES, by_size_main, lab_up, preflight_argv
from bench_timing import proc_cpu_seconds, report_dir_option

from infergate.checks.disk_space import node_sections
from infergate.checks.probe import parse_sections, plan_sections, probe_script
from infergate.plan.loader import load_plan
from infergate.remote import fanout
from infergate.remote.ssh import Remote
from infergate.remote.ssh_config import control_dir, plan_known_hosts, ssh_config

ROOT = Path(__file__).resolve().parents[1]
MARKS_ENV = "PROFILE_PREFLIGHT_MARKS"  # the JSON file the pytest under study writes its marks to
TIME_MARK = "@@time"  # /usr/bin/time's line on the node: wall, user and system seconds
TIMED = f"/usr/bin/time -f '{TIME_MARK} %e %U %S'"  # GNU time: its children's CPU included
NO_PYC = "PYTHONDONTWRITEBYTECODE"  # set, every run compiles every module it imports again
PROBE_FAN_OUT = "fan-out host_probe."  # the probes' task: 'host_probe.<locals>.<lambda>'

# ---- inside the pytest under study (loaded with `-p profile_preflight`) --------------------

_marks: dict[str, float] = {}
_spans: list[tuple[str, float, float]] = []  # SSH waits of the main thread: (what, start, end)


def pytest_configure() -> None:
    """Time every fan-out and every other SSH command of the main thread."""
    fan_out, run = fanout.on_every_node, Remote.run

    def timed_fan_out(remotes: Any, task: Callable[..., Any]) -> Any:
        start = time.time()
        try:
            return fan_out(remotes, task)
        finally:
            _spans.append((f"fan-out {task.__qualname__}", start, time.time()))

    def timed_run(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        start = time.time()
        try:
            return run(self, command, *args, **kwargs)
        finally:  # a fan-out's own commands run in its threads: its span holds them
            if threading.current_thread() is threading.main_thread():
                _spans.append(("ssh", start, time.time()))

    for module in list(sys.modules.values()):  # each module that bound it by name
        if getattr(module, "on_every_node", None) is fan_out:
            module.on_every_node = timed_fan_out  # type: ignore[attr-defined]
    Remote.run = timed_run  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_collection() -> Iterator[None]:
    _marks["collect"] = time.time()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Iterator[None]:
    _marks["tests"], _marks["items"] = time.time(), len(session.items)
    try:
        return (yield)
    finally:
        _marks["tested"] = time.time()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure() -> None:
    Path(os.environ[MARKS_ENV]).write_text(json.dumps({"marks": _marks, "spans": _spans}))


# ---- the pieces the tables are made of -----------------------------------------------------


def breakdown(
    launched: float, marks: dict[str, float], spans: list[tuple[str, float, float]], ended: float
) -> dict[str, float]:
    """The run's wall, launch to exit, in consecutive parts; the tests' part split into the
    host probe's fan-out, every other SSH wait of the main thread, and the rest."""
    probe = sum(end - start for what, start, end in spans if what.startswith(PROBE_FAN_OUT))
    ssh = sum(end - start for _, start, end in spans) - probe
    return {
        "start-up: interpreter, imports, plugins": marks["collect"] - launched,
        "collection": marks["tests"] - marks["collect"],
        "host probe fan-out (every node at once)": probe,
        "other SSH: pings, dials, listeners, rails": ssh,
        "the tests' own Python: pytest per test, judging": marks["tested"]
        - marks["tests"]
        - probe
        - ssh,
        "session end: reports, teardown, exit": ended - marks["tested"],
    }


def outer_cumtime(stats: pstats.Stats, inside: Callable[[tuple[str, int, str]], bool]) -> float:
    """Seconds spent in the functions INSIDE selects, each call counted once: the cumulative
    time of every call into them from a function outside them."""
    total = 0.0
    for func, (*_, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if inside(func):
            total += sum(edge[3] for caller, edge in callers.items() if not inside(caller))
    return total


def cpu_of(pids: list[str]) -> dict[str, float]:
    seconds = {}
    for pid in pids:
        with contextlib.suppress(OSError):  # ended since it was listed
            seconds[pid] = proc_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())
    return seconds


def time_line(stderr: str) -> tuple[float, float, float]:
    """(wall, user, system) seconds from /usr/bin/time's TIME_MARK line."""
    line = next(li for li in stderr.splitlines() if li.startswith(TIME_MARK))
    wall, user, system = (float(x) for x in line.split()[1:4])
    return wall, user, system


# ---- the lab side ---------------------------------------------------------------------------


def node_cgroups(names: list[str]) -> list[Path]:
    from infergate_lab import Lab

    lab = Lab()
    return [lab.cgroups.node_dir(lab.spec(n)) / "system" / "cgroup.procs" for n in names]


def nodes_cpu(cgroups: list[Path]) -> float:
    """CPU seconds of every process in these node cgroups: a session, a probe command ended
    since is in the seconds of its parent (the node's sshd, the probe's shell), reaped there."""
    return sum(cpu_of([pid for procs in cgroups for pid in procs.read_text().split()]).values())


def masters_cpu() -> dict[str, float]:
    """CPU seconds of every SSH master whose socket is in this user's private directory."""
    prefix, pids = f"ssh: {control_dir()}/".encode(), []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and (proc / "cmdline").read_bytes().startswith(prefix):
                pids.append(proc.name)
    return cpu_of(pids)


def grown(before: dict[str, float], after: dict[str, float]) -> float:
    """Seconds the processes of AFTER used since BEFORE (one started since: all of its own)."""
    return sum(s - before.get(pid, 0.0) for pid, s in after.items())


@dataclass(frozen=True)
class Timed:
    stdout: str
    stderr: str
    wall: float
    client_cpu: float  # the ssh client's (and, for a new master, its key exchange's)
    node_cpu: float  # the node's cgroup: sshd, the session, what it ran, dockerd


def timed(remote: Remote, cgroup: Path, command: str) -> Timed:
    node, kids = nodes_cpu([cgroup]), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = remote.run(command)
    wall = time.perf_counter() - start
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = now.ru_utime + now.ru_stime - kids.ru_utime - kids.ru_stime
    return Timed(done.stdout, done.stderr, wall, client, nodes_cpu([cgroup]) - node)


def section_costs(
    remote: Remote, cgroup: Path, planned: tuple[tuple[str, str], ...]
) -> list[tuple[str, float, float, float]]:
    """Each section of the host probe alone, as a probe of its own: (name, wall on the node,
    CPU of its commands, the node's CPU with sshd and dockerd), costliest first."""
    costs = []
    for name, command in planned:
        ran = timed(
            remote, cgroup, f"{TIMED} sh -c {shlex.quote(probe_script(((name, command),)))}"
        )
        wall, user, system = time_line(ran.stderr)
        costs.append((name, wall, user + system, ran.node_cpu))
    return sorted(costs, key=lambda c: c[3], reverse=True)


def alone(
    names: list[str], sections: list[tuple[str, float, float, float]]
) -> dict[str, list[float]]:
    """Each node alone, through the suite's ssh_config and Remote with masters of its own:
    seconds of a new master, a session over it and the host probe, by what, one per node;
    the first node's probe also section by section, into SECTIONS."""
    plan = Path(LAB_INVENTORY)
    inventory = load_plan(plan)
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ig-profile-") as tmp:
        config = Path(tmp, "ssh_config")
        config.write_text(ssh_config(inventory, Path(tmp), 60, plan_known_hosts(plan)))
        try:
            for node, cgroup in zip(inventory.nodes, node_cgroups(names), strict=True):
                t = inventory.thresholds
                remote = Remote(node, config, t.command_timeout_s, t.connect_timeout_s)
                planned = (
                    *plan_sections(inventory.image.ref, inventory.model.path),
                    *node_sections(inventory, node),
                )
                timed_probe = f"{TIMED} sh -c {shlex.quote(probe_script(planned))}"
                master, session = timed(remote, cgroup, "true"), timed(remote, cgroup, "true")
                probe = timed(remote, cgroup, timed_probe)
                if not sections:
                    sections[:] = section_costs(remote, cgroup, planned)
                start = time.perf_counter()
                parse_sections(probe.stdout)
                parse = time.perf_counter() - start
                wall, user, system = time_line(probe.stderr)
                for what, seconds in {
                    "new master (TCP, key exchange, auth): wall": master.wall,
                    "new master: controller CPU": master.client_cpu,
                    "new master: node CPU": master.node_cpu,
                    "a session over the master (`true`): wall": session.wall,
                    "a session: ssh client CPU": session.client_cpu,
                    "a session: node CPU (sshd, shell, timeout)": session.node_cpu,
                    "host probe: wall at the controller": probe.wall,
                    "host probe: wall on the node (/usr/bin/time)": wall,
                    "host probe: its CPU on the node (user + system)": user + system,
                    "host probe: node CPU with sshd and dockerd": probe.node_cpu,
                    "host probe: ssh client CPU": probe.client_cpu,
                    "parse_sections of its output": parse,
                }.items():
                    rows.setdefault(what, []).append(seconds)
        finally:
            for node in inventory.nodes:
                subprocess.run(
                    ["ssh", "-F", str(config), "-O", "exit", node.name],
                    capture_output=True,
                    timeout=10,
                    check=False,
                )
    return rows


@dataclass(frozen=True)
class Run:
    wall: float
    parts: dict[str, float]
    items: int
    cpu: dict[str, float]
    red: dict[str, int]  # tests red by reason, each reason one the judge expects


# Judges a finished run from its exit status and output: how many tests were red, by reason,
# every one expected; ValueError saying why otherwise (the run is then not timed)
Judge = Callable[[int, str], dict[str, int]]


def only_green(returncode: int, _: str) -> dict[str, int]:
    if returncode != 0:
        raise ValueError(f"exit status {returncode}")
    return {}


def run_preflight(
    cgroups: list[Path],
    profile: Path | None = None,
    pyc: Path | None = None,
    judge: Judge = only_green,
) -> Run:
    """One warm run of the host-level preflight, with this module's marks; under cProfile
    into PROFILE if given (cProfile swallows pytest's exit status: only a plain run says
    whether it was green); with NO_PYC unset and its bytecode caches kept under PYC if given
    (PYTHONPYCACHEPREFIX, which pytest's rewritten modules follow too: the checkout is left
    as it was). JUDGE decides which red tests it may have (by default none)."""
    argv = preflight_argv("-p", "profile_preflight")
    if profile:
        argv[1:1] = ["-m", "cProfile", "-o", str(profile)]
    paths = [str(ROOT / "scripts"), *filter(None, [os.environ.get("PYTHONPATH")])]
    with tempfile.NamedTemporaryFile(suffix=".json") as marks_file, report_dir_option() as reports:
        argv.append(reports)
        env = {**os.environ, MARKS_ENV: marks_file.name, "PYTHONPATH": os.pathsep.join(paths)}
        if pyc:
            env.pop(NO_PYC)
            env["PYTHONPYCACHEPREFIX"] = str(pyc)
        nodes, masters = nodes_cpu(cgroups), masters_cpu()
        launched = time.time()
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout
        output = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)  # its CPU and its ssh clients'
        ended = time.time()
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        try:
            red = judge(proc.returncode, output)
        except ValueError as e:
            sys.exit(f"{shlex.join(argv)} failed ({e}), not timing it:\n{output[-3000:]}")
        said = json.loads(Path(marks_file.name).read_text())
    cpu = {
        "controller: pytest and its ssh clients": usage.ru_utime + usage.ru_stime,
        "controller: the SSH masters": grown(masters, masters_cpu()),
        "nodes: sshd, sessions, probe, dockerd": nodes_cpu(cgroups) - nodes,
    }
    marks = said["marks"]
    parts = breakdown(launched, marks, said["spans"], ended)
    return Run(ended - launched, parts, int(marks["items"]), cpu, red)


def top_own_time(path: Path, count: int = 10) -> list[tuple[float, str]]:
    """The functions the main thread spent most of its own time in, under cProfile, each with
    the caller that spent the most time in it."""
    table = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    root = f"{ROOT}{os.sep}"

    def named(func: tuple[str, int, str]) -> str:
        file, line, name = func  # a built-in's file is "~"
        return name if file == "~" else f"{file.removeprefix(root)}:{line}({name})"

    ranked = sorted(table.items(), key=lambda item: item[1][2], reverse=True)[:count]
    return [
        (v[2], f"{named(f)} <- {named(max(v[4], key=lambda c: v[4][c][3]))}" if v[4] else named(f))
        for f, v in ranked
    ]


def profiled(path: Path) -> dict[str, float]:
    """Seconds of the main thread under cProfile: the imports, and infergate.checks."""
    stats = pstats.Stats(str(path))
    checks = f"{os.sep}infergate{os.sep}checks{os.sep}"
    table = stats.stats  # type: ignore[attr-defined]
    return {
        # cProfile counts a recursive function's cumulative time at its outermost call
        "imports (cProfile)": sum(v[3] for f, v in table.items() if f[2] == "_find_and_load"),
        "infergate.checks: probe, facts, judging (cProfile)": outer_cumtime(
            stats,
            lambda f: checks in f[0] and f[2] != "<module>",  # a module's code: its import
        ),
    }


@dataclass(frozen=True)
class Size:
    nodes: int
    runs: list[Run]  # the plain runs, by wall
    under_cprofile: Run
    cprofile: dict[str, float]
    top: list[tuple[float, str]]
    alone: dict[str, list[float]]
    sections: list[tuple[str, float, float, float]]
    with_pyc: list[Run]  # the plain runs with Python's bytecode caches, by wall, if NO_PYC is set

    @property
    def plain(self) -> Run:
        return self.runs[len(self.runs) // 2]

    @property
    def cached(self) -> Run | None:
        return self.with_pyc[len(self.with_pyc) // 2] if self.with_pyc else None


def measure(nodes: int, repeats: int) -> Size:
    """The lab at NODES: each node alone, then the preflight warm, plain REPEATS times (the
    run of median wall is kept, whole), once under cProfile, and, where NO_PYC is set, REPEATS
    times more without it."""
    lab_up(nodes)
    names = [n.name for n in load_plan(Path(LAB_INVENTORY)).nodes]
    cgroups = node_cgroups(names)
    sections: list[tuple[str, float, float, float]] = []
    by_node = alone(names, sections)
    run_preflight(cgroups)  # warm-up: the SSH masters, the page cache
    runs = sorted((run_preflight(cgroups) for _ in range(repeats)), key=lambda r: r.wall)
    with tempfile.TemporaryDirectory(prefix="ig-cprofile-") as tmp:
        out = Path(tmp, "preflight.prof")
        under = run_preflight(cgroups, out)
        top, cprofile = top_own_time(out), profiled(out)
    with_pyc = []
    if os.environ.get(NO_PYC):
        with tempfile.TemporaryDirectory(prefix="ig-pyc-") as pyc:
            run_preflight(cgroups, pyc=Path(pyc))  # writes the caches
            runs_pyc = [run_preflight(cgroups, pyc=Path(pyc)) for _ in range(repeats)]
            with_pyc = sorted(runs_pyc, key=lambda r: r.wall)
    return Size(nodes, runs, under, cprofile, top, by_node, sections, with_pyc)


def report(sizes: list[Size]) -> None:
    first, last = sizes[0], sizes[-1]
    added = last.nodes - first.nodes
    cores = os.cpu_count() or 1
    head = " | ".join(f"{s.nodes} nodes s | share" for s in sizes)
    print(f"\n| where the wall goes | {head} | per added node, ms |")
    print("|---" * (2 + 2 * len(sizes)) + "|")

    def row(what: str, values: list[float], walls: list[float] | None) -> None:
        cells = " | ".join(
            f"{v:.2f} | {v / w:.0%}" if w else f"{v:.2f} | "
            for v, w in zip(values, walls or [0.0] * len(values), strict=True)
        )
        slope = (values[-1] - values[0]) / added * 1000 if added else 0.0
        print(f"| {what} | {cells} | {slope:.0f} |")

    walls = [s.plain.wall for s in sizes]
    for what in first.plain.parts:
        row(what, [s.plain.parts[what] for s in sizes], walls)
    row("wall, launch to exit", walls, walls)
    profile_walls = [s.under_cprofile.wall for s in sizes]
    row("wall under cProfile", profile_walls, profile_walls)
    for what in first.cprofile:
        row(what, [s.cprofile[what] for s in sizes], profile_walls)
    for s in sizes:
        walls_s = ", ".join(f"{r.wall:.2f}" for r in s.runs)
        print(f"\n{s.nodes} nodes: {s.plain.items} tests; plain runs' walls {walls_s} s")
        if pyc := s.cached:
            start = next(iter(pyc.parts))
            print(
                f"  with Python's bytecode caches ({NO_PYC} unset), median of "
                f"{len(s.with_pyc)}: wall {pyc.wall:.2f} s, {start} {pyc.parts[start]:.2f} s "
                f"(without: {s.plain.wall:.2f} s, {s.plain.parts[start]:.2f} s)"
            )
    if last.cached and first.cached and added:
        without = last.plain.wall / first.plain.wall
        cached = last.cached.wall / first.cached.wall
        print(
            f"  {last.nodes} nodes / {first.nodes} nodes: {without:.2f}x without the caches, "
            f"{cached:.2f}x with"
        )

    print(
        f"\n| CPU seconds of the plain run | {' | '.join(f'{s.nodes} nodes' for s in sizes)} "
        "| per added node, ms |"
    )
    print("|---" * (2 + len(sizes)) + "|")
    for what in [*first.plain.cpu, "all", f"{cores} cores x the wall"]:
        values = [
            sum(s.plain.cpu.values())
            if what == "all"
            else cores * s.plain.wall
            if what.endswith("wall")
            else s.plain.cpu[what]
            for s in sizes
        ]
        slope = (values[-1] - values[0]) / added * 1000 if added else 0.0
        print(f"| {what} | {' | '.join(f'{v:.2f}' for v in values)} | {slope:.0f} |")

    print(
        f"\n| each node alone, ms: median (max) over the nodes | "
        f"{' | '.join(f'{s.nodes} nodes' for s in sizes)} |"
    )
    print("|---" * (1 + len(sizes)) + "|")
    for what in first.alone:
        cells = [
            f"{statistics.median(s.alone[what]) * 1000:.0f} ({max(s.alone[what]) * 1000:.0f})"
            for s in sizes
        ]
        print(f"| {what} | {' | '.join(cells)} |")

    print(
        f"\n| the host probe's costliest sections on {last.nodes} nodes' first, alone, ms "
        "| wall | its CPU | the node's CPU |\n|---|---|---|---|"
    )
    for name, *costs in last.sections[:10]:
        print(f"| {name} | {' | '.join(f'{c * 1000:.0f}' for c in costs)} |")
    sums = [sum(column) * 1000 for column in list(zip(*last.sections, strict=True))[1:]]
    print(
        f"| all {len(last.sections)}, one session each | {' | '.join(f'{s:.0f}' for s in sums)} |"
    )

    for size in sizes:
        print(f"\nthe main thread's own time under cProfile, {size.nodes} nodes (s):")
        for seconds, where in size.top:
            print(f"  {seconds:6.3f}  {where}")


def main() -> None:
    by_size_main(__doc__ or "", SIZES, measure, report)


if __name__ == "__main__":
    main()
