"""The real preflight against the real lab: green when healthy, and each fault injected for
real turns exactly the tests that should see it red, naming the right node."""

from __future__ import annotations

import pytest

from selftest.suite import SuiteRun, run_suite

pytestmark = pytest.mark.lab

HOST = "test_host.py::"
FABRIC = "test_fabric.py::"
MEMORY = "test_memory.py::"
PER_NODE = (
    HOST + "test_ssh_reachable_facts_gathered",
    HOST + "test_docker_engine_answers",
    FABRIC + "test_fabric_interface_up_with_planned_address",
    FABRIC + "test_fabric_peers_answer_ping",
    MEMORY + "test_memory_available_for_plan",
)
MTU = FABRIC + "test_fabric_mtu_equal_on_every_node"
DIST_INIT = FABRIC + "test_dist_init_port_reachable_from_every_node"
CLUSTER = (MTU, DIST_INIT)


def preflight(pytester: pytest.Pytester, *args: str) -> SuiteRun:
    return run_suite(pytester, "-m", "preflight", *args)


def every_test(nodes: tuple[str, ...] = ("node1", "node2")) -> set[str]:
    return {f"{t}[{n}]" for t in PER_NODE for n in nodes} | set(CLUSTER)


def test_healthy_lab_all_green(clean_lab, pytester):
    run = preflight(pytester)
    assert set(run.outcomes) == every_test(), run.output
    assert run.red() == set(), run.output


def test_healthy_lab_green_under_xdist(clean_lab, pytester):
    run = preflight(pytester, "-n", "2")
    assert set(run.outcomes) == every_test(), run.output
    assert run.red() == set(), run.output


def test_link_down_names_the_node(clean_lab, pytester):
    clean_lab.apply_fault("link-down", "node2")
    run = preflight(pytester)
    assert run.red() == {
        FABRIC + "test_fabric_interface_up_with_planned_address[node2]",
        FABRIC + "test_fabric_peers_answer_ping[node1]",
        FABRIC + "test_fabric_peers_answer_ping[node2]",
        DIST_INIT,
    }, run.output
    text = run.message(FABRIC + "test_fabric_interface_up_with_planned_address[node2]")
    assert "node2 (10.251.0.12)" in text
    assert "fab0 is DOWN" in text
    assert "ip link set fab0 up" in text
    assert "node2 (10.252.0.12) answered 0 of 2 pings" in run.message(
        FABRIC + "test_fabric_peers_answer_ping[node1]"
    )
    assert "node2 (10.251.0.12)" in run.message(DIST_INIT)


def test_mtu_mismatch_names_the_node(clean_lab, pytester):
    clean_lab.apply_fault("mtu", "node2", "1400")
    run = preflight(pytester)
    assert run.red() == {MTU}, run.output
    text = run.message(MTU)
    assert "node2 (10.251.0.12)" in text
    assert "found MTU 1400; planned MTU 1500" in text
    assert "node1" not in text


def test_memory_held_names_the_node(clean_lab, pytester):
    clean_lab.apply_fault("hold-memory", "node1", "4")
    run = preflight(pytester)
    test = MEMORY + "test_memory_available_for_plan[node1]"
    assert run.red() == {test}, run.output
    text = run.message(test)
    assert "node1 (10.251.0.11)" in text
    assert "bounded by cgroup /infergate-lab/node1" in text
    assert "planned at least 3.1 GiB" in text


def test_sshd_stopped_names_the_node_quickly(clean_lab, pytester):
    clean_lab.apply_fault("sshd-stop", "node2")
    run = preflight(pytester)
    assert run.red() == every_test(("node2",)), run.output
    for test in run.red():
        assert "node2 (10.251.0.12) is unreachable over SSH" in run.message(test), test
        assert run.outcomes[test].seconds < 10, (test, run.outcomes[test].seconds)


def test_docker_stopped_names_the_node(clean_lab, pytester):
    clean_lab.apply_fault("docker-stop", "node2")
    run = preflight(pytester)
    test = HOST + "test_docker_engine_answers[node2]"
    assert run.red() == {test}, run.output
    text = run.message(test)
    assert "node2 (10.251.0.12)" in text
    assert "no engine answered" in text
    assert "systemctl start docker" in text
