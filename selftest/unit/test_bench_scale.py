"""scripts/bench_scale.py's judge of a run against the sshd-only lab: the Docker engine's test
red on every node for its engine not answering, and ping tests red only for lost pings,
counted (the lab run itself is the script's:
`flock /tmp/infergate-lab.lock .venv/bin/python scripts/bench_scale.py`)."""

import importlib
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
RECORDED = Path(__file__).parents[1] / "data" / "bench" / "preflight-sshd-only-4-nodes.txt"


@pytest.fixture
def bench_scale(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    return importlib.import_module("bench_scale")


@pytest.fixture
def output() -> str:
    return RECORDED.read_text()


def test_every_node_red_only_for_its_engine_is_the_expected_run(bench_scale, output):
    assert bench_scale.expected_reds(1, output, 4) == {"no dockerd": 4, "pings lost": 0}


# A ping test red in a 128-node run of the sshd-only lab: its head and first two of 9 problems
LOST_PINGS = (RECORDED.parent / "ping-lost-128-nodes.txt").read_text()


def with_ping_red(output: str, section: str) -> str:
    at = output.index("=====", output.index("[node4] ___"))
    return output[:at] + section + output[at:].replace("4 failed", "5 failed")


def test_a_node_whose_peers_lost_pings_is_counted_not_hidden(bench_scale, output):
    run = with_ping_red(output, LOST_PINGS)
    assert bench_scale.expected_reds(1, run, 4) == {"no dockerd": 4, "pings lost": 1}


def test_a_ping_test_red_for_anything_but_lost_pings_stops_the_bench(bench_scale, output):
    run = with_ping_red(output, LOST_PINGS.replace("answered 1 of 2 pings", "has no fab0"))
    with pytest.raises(ValueError, match=r"ping\[node2\] red for another reason"):
        bench_scale.expected_reds(1, run, 4)


def test_another_test_red_stops_the_bench(bench_scale, output):
    other = output.replace("test_docker_engine_answers[node3]", "test_memory_available[node3]")
    with pytest.raises(ValueError, match=r"test_memory_available\[node3\] red for another"):
        bench_scale.expected_reds(1, other, 4)


def test_the_engine_test_red_for_another_reason_stops_the_bench(bench_scale, output):
    other = output.replace("no engine answered: Cannot connect", "permission denied", 1)
    with pytest.raises(ValueError, match=r"\[node1\] red for another reason"):
        bench_scale.expected_reds(1, other, 4)


@pytest.mark.parametrize(
    ("returncode", "change", "nodes", "said"),
    [
        (1, ("4 failed,", "4 failed, 1 error,"), 4, "not only failed tests"),  # a fixture's
        (2, ("", ""), 4, "exit status 2"),  # interrupted
        (1, ("", ""), 5, "expected one per node"),  # a node's engine test missing
        (1, ("4 failed, 19 passed, 4 skipped in 1.33s", "KeyboardInterrupt"), 4, "no summary"),
    ],
)
def test_anything_else_wrong_with_the_run_stops_the_bench(
    bench_scale, output, returncode, change, nodes, said
):
    with pytest.raises(ValueError, match=said):
        bench_scale.expected_reds(returncode, output.replace(*change), nodes)
