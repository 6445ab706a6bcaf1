"""The memory guard's parsers and judges on recorded outputs (selftest/data/memguard: the
sampling loop and the snapshot run on this controller; gb10/ and gpu-public/: public GB10 and
PSI samples), and its sampling sessions for real, as local shells."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from infergate.checks.memguard import (
    GPUS,
    TICK,
    MemorySample,
    check_memory_floor,
    enforced,
    parse_gpus,
    parse_psi_avg10,
    parse_tick,
    sampler_script,
    ticks,
)
from infergate.checks.memguard_growth import grown, parse_size, parse_snapshot
from infergate.checks.memory import GIB
from infergate.deploy.memguard import Breach, MemoryGuard
from infergate.plan.model import Guard, Inventory, parse_inventory
from infergate.reports.inference import ReportMeta, Results
from infergate.reports.inference_html import render_html
from infergate.reports.inference_json import read_results, render_json
from infergate.reports.memory_curve import MemoryCurve
from selftest.suite import LAB_PLAN

DATA = Path(__file__).resolve().parents[1] / "data"
MEMGUARD = DATA / "memguard"


def recorded(name: str) -> str:
    return (MEMGUARD / name).read_text()


def test_the_recorded_loop_parses_tick_by_tick() -> None:
    items = list(ticks(recorded("sampler-controller.txt").splitlines()))
    assert items[0] is False  # no nvidia-smi on the controller: not unified memory
    samples = [i for i in items[1:] if isinstance(i, MemorySample)]
    assert len(samples) == 3
    first = samples[0]
    assert first.total == 24683784 * 1024
    assert first.available == 23411396 * 1024
    assert first.usable == first.available  # no cgroup limit there
    assert first.bound == ""
    assert (first.psi_some, first.psi_full) == (0.0, 0.0)
    assert samples[1].t_s - first.t_s == pytest.approx(1.03, abs=0.01)


def test_a_cgroup_limit_bounds_what_is_usable() -> None:
    body = "MemTotal: 24683784 kB\nMemAvailable: 23387276 kB\n" + (
        "/infergate-lab/node2/system 9223372036854771712 1048576 0\n"
        "/infergate-lab/node2 6442450944 5368709120 104857600\n"
    )
    sample = parse_tick(f"{TICK} 100.5", body)
    assert sample.bound == "/infergate-lab/node2"
    assert sample.usable == 6442450944 - (5368709120 - 104857600)
    assert sample.psi_some is None  # no PSI lines: a kernel without it


def test_gb10_is_unified_memory_and_a_gpuless_node_is_not() -> None:
    gb10 = (DATA / "gb10" / "query-gpu-index-name-memory.csv").read_text()
    assert parse_gpus(gb10) is True
    assert parse_gpus("") is False
    lines = [GPUS, *gb10.splitlines(), f"{TICK} 5.0", "@@@ end"]
    assert next(ticks(lines)) is True


def test_psi_some_and_full_avg10_are_read() -> None:
    systemd = (DATA / "gpu-public" / "psi-systemd-psi-util.txt").read_text()
    assert parse_psi_avg10(systemd) == (0.22, 0.23)
    assert parse_psi_avg10("psi some avg10=3.50 avg60=1 avg300=0 total=9\n") == (3.5, None)


@pytest.mark.parametrize(
    ("mode", "unified", "acts"),
    [("auto", True, True), ("auto", False, False), ("on", False, True), ("off", True, False)],
)
def test_the_guard_acts_on_unified_memory_or_where_the_plan_says(mode, unified, acts) -> None:
    assert enforced(Guard(memory=mode), unified) is acts


def gb10_idle() -> MemorySample:
    """The idle Spark's /proc/meminfo lines (gb10/meminfo-idle.txt) as a tick."""
    meminfo = (DATA / "gb10" / "meminfo-idle.txt").read_text()
    return parse_tick(f"{TICK} 1.0", meminfo + "psi some avg10=12.50 avg60=3 avg300=1 total=5\n")


def test_below_the_floor_names_the_figures_and_the_key() -> None:
    sample = gb10_idle()  # 113.1 GiB available of 121.7
    assert check_memory_floor(sample, 8) == []
    (problem,) = check_memory_floor(sample, 120)
    assert problem.found == "MemAvailable 113.1 GiB of 121.7 GiB, PSI some 12.5 % (avg10)"
    assert problem.planned == "at least 120 GiB available (guard.memory_floor_gib)"
    assert "this run's containers were removed" in problem.remedy


def test_a_process_that_grew_is_named_with_its_growth() -> None:
    before = parse_snapshot(recorded("snapshot-before.txt"), "run-1")
    after = parse_snapshot(recorded("snapshot-after-hog.txt"), "run-1")
    lines = grown(before, after)
    assert lines[0] == "process 2126 python3 +0.31 GiB, now 0.31 GiB"  # the 300 MiB hog
    assert len(lines) == 1, lines  # the rest moved by less than 64 MiB


def test_foreign_containers_are_named_and_this_runs_are_not() -> None:
    snap = "\n".join(
        [
            "@@@ labels",
            "3f2a9c0d1e7b55\t",
            "77aa00bb11cc22\trun-1",
            "@@@ stats",
            "3f2a9c0d1e7b\tleftover-embeddings\t201.2MiB / 6GiB",
            "77aa00bb11cc\tinfergate-run-1\t3.1GiB / 6GiB",
        ]
    )
    after = parse_snapshot(snap, "run-1")
    assert list(after.containers) == ["leftover-embeddings"]
    empty = parse_snapshot("", "run-1")
    assert grown(empty, after) == [
        "container leftover-embeddings (not this run's) +0.20 GiB, now 0.20 GiB"
    ]


@pytest.mark.parametrize(
    ("text", "size"), [("0B", 0), ("201.2MiB", int(201.2 * 2**20)), ("1.5GiB", 3 * 2**29)]
)
def test_docker_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


def lab_plan(**guard: object) -> Inventory:
    import yaml

    data = yaml.safe_load(LAB_PLAN.read_text())
    data["guard"] = guard
    return parse_inventory(data)


def test_the_sessions_sample_and_hand_over_the_first_breach_once() -> None:
    """The loop in a local shell (a `connection: local` node's form), every 0.2 s; a floor
    above any machine's memory, enforced: one breach, while the samples go on."""
    plan = lab_plan(memory="on", memory_floor_gib=60000, memory_interval_s=0.2)
    heard: list[Breach] = []
    got = threading.Event()

    def on_breach(breach: Breach) -> None:
        heard.append(breach)
        got.set()

    guard = MemoryGuard(plan.nodes, plan.guard, lambda n, s: ["sh", "-c", s], on_breach)
    guard.start()
    try:
        assert got.wait(10), "no breach heard"
        time.sleep(0.6)
    finally:
        guard.stop()
    assert len(heard) == 1
    assert heard[0].node.name in ("node1", "node2")  # whichever read first
    assert "guard.memory_floor_gib" in heard[0].problems[0].planned
    assert all(len(k.samples) >= 2 for k in guard.nodes.values())
    assert all(k.enforced for k in guard.nodes.values())


def test_the_report_shows_a_curve_per_node_and_results_json_keeps_them(tmp_path) -> None:
    samples = [gb10_idle()] * 3
    curve = MemoryCurve.of("node1", "node1 (10.251.0.11)", True, 8.0, samples)
    results = Results(ReportMeta("p", "http://x/v1", "m", "t"), (), memory=(curve,))
    page = render_html(results)
    assert "Memory during the launch and the load" in page
    assert "Memory available on node1 (10.251.0.11) over 3 samples: lowest 113.07 GiB" in page
    path = tmp_path / "results.json"
    path.write_text(render_json(results))
    assert read_results(path).memory == (curve,)
    assert curve.available_gib[0] == pytest.approx(118566368 * 1024 / GIB, abs=1e-3)


def test_the_plan_refuses_an_unknown_mode() -> None:
    from infergate.plan.model import InventoryError

    with pytest.raises(InventoryError, match=r"guard\.memory"):
        lab_plan(memory="sometimes")
    assert lab_plan().guard == Guard()


def test_the_script_forks_only_sleep_per_tick() -> None:
    script = sampler_script(1)
    loop = script.split("while :; do", 1)[1]
    assert [c for c in ("cat ", "awk", "grep", "date") if c in loop] == []
    assert "sleep 1\n" in loop


def test_an_h200_host_has_memory_of_its_own_and_a_cgroup_v2_limit_is_read() -> None:
    """The loop on a lent H200 host (cgroup v2, its sandbox limited to 128 GiB)."""
    items = list(ticks(recorded("sampler-h200.txt").splitlines()))
    assert items[0] is False  # 143771 MiB of its own: the guard records, `auto` does not act
    first = items[1]
    assert isinstance(first, MemorySample)
    assert first.available == 131466068 * 1024
    assert first.usable == first.available  # the 128 GiB limit leaves more than MemAvailable
    assert first.bound == ""
    assert enforced(Guard(), False) is False


def test_an_unreadable_tick_is_dropped_and_the_next_is_read() -> None:
    lines = [GPUS, f"{TICK} 1.0", "MemTotal: 1 kB", "@@@ end", f"{TICK} 2.0"]
    lines += ["MemTotal: 4 kB", "MemAvailable: 2 kB", "@@@ end"]
    items = list(ticks(lines))
    assert items[0] is False
    assert [s.t_s for s in items[1:] if isinstance(s, MemorySample)] == [2.0]
