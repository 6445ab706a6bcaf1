"""scripts/bench.py: issue 16's table from made-up figures, each row judged against its goal
(the lab run itself is the script's: `flock /tmp/infergate-lab.lock .venv/bin/python
scripts/bench.py`)."""

import importlib
from types import ModuleType

import pytest

from infergate.checks.model_hash import GB
from selftest.unit.test_profile_preflight import SCRIPTS

PREFLIGHT = {  # seconds of each run, by lab size and mode
    2: {"one process": [1.3, 1.2, 1.5], "-n auto": [2.0, 2.2, 2.1], "-n 2": [2.1, 2.0, 2.4]},
    16: {"one process": [3.0, 3.1, 2.9], "-n auto": [2.8, 2.9, 3.0], "-n 2": [4.5, 4.4, 4.6]},
}
IMAGE = {"bare": [4.0, 4.4, 4.2], "full, fresh": [7.0, 5.0, 6.0]}
CONTROLLER = {2: 0.86, 16: 1.16}  # CPU seconds


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    return importlib.import_module("bench")


@pytest.fixture
def hashing(monkeypatch: pytest.MonkeyPatch) -> object:
    """Two 2 GB files on 2 cores of 2 GB/s each (the cores' limit: 4 GB/s); cold, `cat` in
    2.5 s (1.6 GB/s, the limit) and the hash in 2.7 s; warm, `cat` in 0.5 s (8 GB/s: the
    cores' 4 GB/s is the limit) and the hash in 2 s."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    hashing = importlib.import_module("bench_model_hash").Hashing
    return hashing(
        "node1", [2 * 10**9] * 2, 2, 2 * GB, [2.0, 3.0, 2.5], [2.8, 2.6, 2.7], 0.5, 2.0, 0.2, 0
    )


def test_a_goal_holds_at_its_bound_and_a_reported_row_has_no_verdict(bench):
    assert [bench.at_most(5.0, "<= 5 s").verdict(v) for v in (4.9, 5.0, 5.1)] == [
        "PASS",
        "PASS",
        "MISS",
    ]
    assert [bench.at_least(0.9, ">= 0.9x").verdict(v) for v in (0.89, 0.9, 1.2)] == [
        "MISS",
        "PASS",
        "PASS",
    ]
    assert bench.REPORTED.verdict(0.0) == "-"


def test_no_slower_allows_the_one_process_rounds_own_spread_and_no_more(bench):
    goal = bench.no_slower([2.0, 2.1, 1.9])  # spread 0.2 / 2.0: 10 %
    assert goal.text == "<= 1.0x + one process's spread (1.10x)"
    assert [goal.verdict(v) for v in (0.9, 1.09, 1.11, 1.6)] == ["PASS", "PASS", "MISS", "MISS"]
    assert bench.no_slower([2.0, 2.0, 2.0]).verdict(1.01) == "MISS"  # no noise: no slack


def test_every_row_of_the_issue_is_measured_and_judged_in_its_order(bench, hashing):
    rows = bench.rows(PREFLIGHT, CONTROLLER, hashing, IMAGE)
    judged = [(r.what, r.measured, r.goal.text, r.goal.verdict(r.value)) for r in rows]
    assert judged == [
        ("host-level preflight, 2 nodes, one process", "1.30 s", "<= 5 s", "PASS"),
        ("16 nodes / 2 nodes, one process", "3.00 / 1.30 s = 2.31x", "<= 1.5x", "MISS"),
        (bench.CONTROLLER, "1.16 / 0.86 s = 1.35x", "<= 1.5x", "PASS"),
        (
            "`-n auto` / one process, 2 nodes",
            "2.10 / 1.30 s = 1.62x",
            "<= 1.0x + one process's spread (1.23x)",
            "MISS",
        ),
        (
            "`-n auto` / one process, 16 nodes",
            "2.90 / 3.00 s = 0.97x",
            "<= 1.0x + one process's spread (1.07x)",
            "PASS",
        ),
        (bench.FORCED, "4.50 / 3.00 s = 1.50x", "reported", "-"),
        (
            "full SHA-256 / the limit, cold",
            "1.48 / 1.60 GB/s = 0.93x (limit: read 1.60, cores 4.00)",
            ">= 0.9x",
            "PASS",
        ),
        (
            "the same, warm page cache",
            "2.00 / 4.00 GB/s = 0.50x (limit: read 8.00, cores 4.00)",
            "reported",
            "-",
        ),
        (bench.FRESH, "6.00 / 4.20 s = 1.43x", "<= 1.5x", "PASS"),
    ]


def test_the_table_is_markdown_with_the_verdict_last(bench, hashing):
    lines = bench.table(bench.rows(PREFLIGHT, CONTROLLER, hashing, IMAGE)).splitlines()
    assert lines[:2] == ["| what | measured | goal | met |", "| --- | --- | --- | --- |"]
    assert len(lines) == 2 + 9
    assert lines[2] == "| host-level preflight, 2 nodes, one process | 1.30 s | <= 5 s | PASS |"
    assert all(line.count(" | ") == 3 for line in lines)


def test_the_machine_line_names_its_cores_and_the_isas_it_has(bench):
    cpuinfo = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 sha_ni avx512f avx512bw\n"
    assert bench.machine(cpuinfo, 2) == "2 cores, avx2 avx512f"
    assert bench.machine("flags\t: fpu sse2 avx\n", 4) == "4 cores, no avx2"
