"""fixtures/shards.py: the cut of the plan into shards, --shard-by's usage errors, and sharded
runs against one process on a plan whose nodes refuse."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infergate.fixtures.shards import shard_indices
from infergate.plan.loader import load_plan
from infergate.plan.model import Node
from selftest.suite import LAB_PLAN, PHASE_DIRS, PROJECT_CONFIG, closed_plan, run_suite

MTU = "test_fabric.py::test_fabric_mtu_equal_on_every_node"


def nodes(*jumps: str | None) -> list[Node]:
    """The lab plan's first node, once per JUMP (None: reached directly), named n1, n2, ..."""
    first = load_plan(LAB_PLAN).nodes[0]
    return [
        replace(first, name=f"n{i}", ssh=replace(first.ssh, jump=jump))
        for i, jump in enumerate(jumps, 1)
    ]


def test_plan_cuts_the_node_list_into_one_slice_per_worker_in_order():
    five = nodes(*[None] * 5)
    assert shard_indices(five, "plan", 2) == {"n1": 0, "n2": 0, "n3": 0, "n4": 1, "n5": 1}
    assert set(shard_indices(five, "plan", 4).values()) == {0, 1, 2, 3}
    assert set(shard_indices(five, "plan", 1).values()) == {0}


def test_jump_keeps_each_jump_hosts_nodes_together_dealt_round_the_workers():
    found = shard_indices(nodes("a", "b", "a", None, "c", "b"), "jump", 2)
    # a -> 0, b -> 1, direct -> 0, c -> 1: the jump hosts in the order of their first node
    assert found == {"n1": 0, "n2": 1, "n3": 0, "n4": 0, "n5": 1, "n6": 1}


def refused(pytester, *args: str) -> str:
    """What the suite says when it refuses ARGS as a usage error."""
    result = pytester.runpytest_subprocess(*PROJECT_CONFIG, "-m", "preflight", *args, *PHASE_DIRS)
    assert result.ret == 4, result.stdout.str()
    return result.stderr.str()


def test_shard_by_without_workers_is_a_usage_error_naming_what_to_add(pytester):
    said = refused(pytester, "--shard-by=plan")
    assert "--shard-by plan: no workers to give the shards to; add -n N" in said


def test_shard_by_with_another_distribution_is_a_usage_error(pytester):
    said = refused(pytester, "--shard-by=jump", "-n", "2", "--dist=each")
    assert "--shard-by jump: shards are xdist groups; drop --dist each" in said


def test_sharded_workers_name_unreachable_nodes_as_one_process_does(pytester):
    """Two local workers, each the controller of one of the closed plan's nodes: every
    verdict and message is the one process's, the nodes' unreachability included (it
    travels from the shards to the cluster tests as a pickled outcome)."""
    plan = closed_plan(pytester.path)
    one = run_suite(pytester, "-m", "preflight and not image", "--report-dir=one", inventory=plan)
    sharded = run_suite(
        pytester,
        "-m",
        "preflight and not image",
        "--report-dir=sharded",
        "-n",
        "2",
        "--shard-by=plan",
        "-v",
        inventory=plan,
    )
    assert "@shard-1" in sharded.output, sharded.output[-3000:]
    assert "127.0.0.2" in one.message("test_host.py::test_ssh_reachable_facts_gathered[node2]")
    seen = {t: (o.status, o.message) for t, o in one.outcomes.items()}
    assert {t: (o.status, o.message) for t, o in sharded.outcomes.items()} == seen


@pytest.mark.timeout(120)
def test_a_sharded_run_of_cluster_tests_alone_waits_for_no_shard(pytester):
    """With no shard's test selected, the cluster tests start at once: they waited for a
    shard's completion that never came (a worker's whole SHARDS_WAIT, an hour)."""
    plan = closed_plan(pytester.path)
    args = ("-m", "preflight and not image", "-k", "mtu_equal", "-n", "2", "--shard-by=plan")
    run = run_suite(pytester, *args, inventory=plan)
    assert [o.status for o in run.outcomes.values()] == ["skipped"], run.output[-3000:]
    assert "unreachable over SSH" in run.outcomes[MTU].message
