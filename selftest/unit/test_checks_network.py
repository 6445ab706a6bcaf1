"""Fabric parsers and judges on outputs recorded from the lab (selftest/data/README.md)."""

from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

import pytest

from infergate.checks.facts import interfaces_of
from infergate.checks.network import (
    PeerResult,
    check_fabric_interface,
    check_mtu_parity,
    check_peers_reachable,
    parse_ping,
    split_ping_outputs,
)
from infergate.checks.probe import parse_sections

LAB = Path(__file__).parents[1] / "data" / "lab"
PLANNED = {"node1": IPv4Interface("10.252.0.11/24"), "node2": IPv4Interface("10.252.0.12/24")}


def interfaces(case: str, node: str):
    return interfaces_of(parse_sections((LAB / f"{case}-{node}-probe.txt").read_text()))


def peer_result(case: str, node: str, peer: str) -> PeerResult:
    (text, _) = split_ping_outputs((LAB / f"{case}-{node}-ping.txt").read_text())
    return PeerResult(peer, PLANNED[peer].ip, *parse_ping(text), text)


KEY = "fabric.interface"  # the plan-wide key: these nodes name no interface of their own


# (not `node`: the suite's plugin parametrizes that name from the inventory)
@pytest.mark.parametrize("name", ["node1", "node2"])
def test_healthy_lab_fabric_interface_passes(name):
    seen = interfaces("healthy", name)
    assert set(seen) == {"lo", "mgmt0", "fab0"}
    assert seen["fab0"].up
    assert seen["fab0"].mtu == 1500
    assert check_fabric_interface(seen, "fab0", PLANNED[name], KEY) == []


def test_link_down_reads_as_down_with_the_command_to_raise_it():
    seen = interfaces("link-down", "node2")
    assert not seen["fab0"].up
    (problem,) = check_fabric_interface(seen, "fab0", PLANNED["node2"], KEY)
    assert problem.found == "fab0 is DOWN (no carrier or admin down)"
    assert "sudo ip link set fab0 up" in problem.remedy


def test_missing_interface_lists_what_is_there_and_where_the_address_is():
    seen = interfaces("healthy", "node1")
    (problem,) = check_fabric_interface(seen, "enp1s0f1np1", PLANNED["node1"], KEY)
    assert (
        problem.found
        == "no interface enp1s0f1np1; present: fab0, lo, mgmt0 (10.252.0.11 is on fab0)"
    )
    assert "fix fabric.interface in the plan" in problem.remedy


def test_wrong_address_names_the_one_found():
    (problem,) = check_fabric_interface(
        interfaces("healthy", "node1"), "fab0", IPv4Interface("10.252.0.99/24"), KEY
    )
    assert problem.found == "fab0 has 10.252.0.11/24"
    assert "ip addr add 10.252.0.99/24 dev fab0" in problem.remedy


def test_mtu_mismatch_names_only_the_odd_node():
    mtus = {n: interfaces("mtu-1400", n)["fab0"].mtu for n in ("node1", "node2")}
    assert mtus == {"node1": 1500, "node2": 1400}
    problems = check_mtu_parity(mtus, planned=1500)
    assert list(problems) == ["node2"]
    assert problems["node2"][0].found == "MTU 1400"
    assert problems["node2"][0].planned == "MTU 1500 (fabric.mtu)"
    named = check_mtu_parity(mtus, 1500, {"node1": "fab0", "node2": "fab0"})  # inventories/lab
    assert named["node2"][0].remedy.startswith("`sudo ip link set fab0 mtu 1500` on node2")


def test_mtu_without_a_plan_takes_the_majority():
    problems = check_mtu_parity({"a": 9000, "b": 9000, "c": 1500}, planned=None)
    assert list(problems) == ["c"]
    assert problems["c"][0].planned == "MTU 9000 (the other nodes; fabric.mtu unset)"


def test_pings_answered_on_a_healthy_fabric():
    result = peer_result("healthy", "node1", "node2")
    assert (result.sent, result.received) == (2, 2)
    assert check_peers_reachable("fab0", [result]) == []


def test_pings_lost_to_a_downed_peer_name_the_peer():
    result = peer_result("link-down", "node1", "node2")
    (problem,) = check_peers_reachable("fab0", [result])
    assert problem.found == "node2 (10.252.0.12) answered 0 of 2 pings over fab0"


def test_ping_that_cannot_send_says_why():
    result = peer_result("link-down", "node2", "node1")
    assert (result.sent, result.received) == (0, 0)
    (problem,) = check_peers_reachable("fab0", [result])
    assert problem.found.endswith("over fab0: ping: connect: Network is unreachable")


def test_parse_ping_of_nothing_is_nothing_sent():
    assert parse_ping("") == (0, 0)
    assert IPv4Address("10.252.0.12") == PLANNED["node2"].ip
