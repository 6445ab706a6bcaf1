"""scripts/profile_preflight.py: the sums its tables are made of (the lab run itself is the
script's: `flock /tmp/infergate-lab.lock .venv/bin/python scripts/profile_preflight.py`)."""

import cProfile
import importlib
import os
import pstats
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def profile_preflight(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    return importlib.import_module("profile_preflight")


def test_the_parts_add_up_to_the_wall_and_the_tests_part_is_split(profile_preflight):
    marks = {"collect": 100.8, "tests": 101.1, "tested": 103.5}
    spans = [
        ("fan-out host_probe.<locals>.<lambda>", 101.2, 102.0),
        ("fan-out fabric_pings.<locals>.ping_peers", 102.1, 102.4),
        ("ssh", 102.5, 102.6),
    ]
    parts = profile_preflight.breakdown(100.0, marks, spans, 103.9)
    assert list(parts.values()) == pytest.approx([0.8, 0.3, 0.8, 0.4, 1.2, 0.4])
    assert sum(parts.values()) == pytest.approx(3.9)


def inner(n: int) -> int:
    return sum(range(n))


def outer() -> int:
    total = 0
    for _ in range(3):  # a loop, not a comprehension: its own frame would be the caller
        total += inner(20_000)
    return total


def calls() -> None:  # the profiled root: a call into INSIDE needs a profiled caller
    outer()
    inner(10_000)


def test_a_call_inside_the_selected_functions_is_counted_once(profile_preflight):
    profiler = cProfile.Profile()
    profiler.runcall(calls)
    stats = pstats.Stats(profiler)
    table = stats.stats
    ours = {name: f for f in table if f[0] == __file__ and (name := f[2]) in ("outer", "inner")}
    inner_from_outer = table[ours["inner"]][4][ours["outer"]][3]

    only_inner = profile_preflight.outer_cumtime(stats, lambda f: f == ours["inner"])
    both = profile_preflight.outer_cumtime(stats, lambda f: f in ours.values())

    assert only_inner == pytest.approx(table[ours["inner"]][3])
    assert both == pytest.approx(table[ours["outer"]][3] + only_inner - inner_from_outer)
    assert both < table[ours["outer"]][3] + table[ours["inner"]][3]


def test_cpu_seconds_of_a_process_whose_name_holds_parentheses(profile_preflight):
    tick = os.sysconf("SC_CLK_TCK")
    fields = ["S", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "100", "200", "300", "400"]
    stat = f"1234 (a) b (c)) {' '.join(fields)} 20 0 1"
    assert profile_preflight.proc_cpu_seconds(stat) == pytest.approx(1000 / tick)


def test_cpu_seconds_of_this_process_agree_with_times(profile_preflight):
    inner(2_000_000)
    seen = profile_preflight.proc_cpu_seconds(Path("/proc/self/stat").read_text())
    t = os.times()
    assert seen == pytest.approx(t.user + t.system + t.children_user + t.children_system, abs=0.05)


def test_the_time_line_is_found_among_other_stderr(profile_preflight):
    stderr = "Command exited with non-zero status 1\n@@time 0.52 0.10 0.20\n"
    assert profile_preflight.time_line(stderr) == (0.52, 0.10, 0.20)
