"""Every pair of nodes: the tournament's rounds and steps (infergate.checks.pairs), and the
rail judge's one finding per cause over them (infergate.checks.bandwidth.check_rails). The
figures are invented around the lab's measured ones: ~1-3 Gb/s over its veth, 0.02 Gb/s
through a 20 Mbit/s shaper (selftest/lab/test_every_pair_lab.py runs the faults for real)."""

from collections import Counter
from itertools import permutations

import pytest

from infergate.checks.bandwidth import UNREACHABLE, Rail, check_rails
from infergate.checks.pairs import schedule, tournament

NODES = ["node1", "node2", "node3", "node4"]


def names(n: int) -> list[str]:
    return [f"node{i}" for i in range(1, n + 1)]


@pytest.mark.parametrize("n", range(2, 14))
def test_tournament_meets_every_pair_once_and_no_node_twice_a_round(n):
    rounds = tournament(names(n))
    assert len(rounds) == n - 1 + n % 2
    met = Counter(frozenset(pair) for pairs in rounds for pair in pairs)
    assert set(met) == {frozenset(p) for p in permutations(names(n), 2)}
    assert set(met.values()) == {1}
    for pairs in rounds:
        seated = [node for pair in pairs for node in pair]
        assert len(seated) == len(set(seated)) == n - n % 2


@pytest.mark.parametrize("n", [2, 3, 4, 7, 16])
def test_up_to_the_plans_size_every_ordered_pair_once_one_stream_per_node(n):
    plan = schedule(names(n), all_up_to=16, sample_rounds=4, seed=0)
    streams = [pair for step in plan.steps for pair in step]
    assert sorted(streams) == sorted(permutations(names(n), 2))
    assert not plan.sampled
    assert plan.streams == n * (n - 1)
    for step in plan.steps:
        busy = [node for pair in step for node in pair]
        assert len(busy) == len(set(busy))


def test_two_nodes_are_two_steps_one_way_each():
    plan = schedule(["a", "b"], all_up_to=16, sample_rounds=4, seed=0)
    assert plan.steps == [[("a", "b")], [("b", "a")]]


@pytest.mark.parametrize(("n", "rounds"), [(40, 2), (41, 2), (100, 4), (101, 3)])
def test_past_it_a_seeded_sample_covers_every_node_twice_each_way(n, rounds):
    plan = schedule(names(n), all_up_to=16, sample_rounds=rounds, seed=7)
    assert plan.sampled
    assert plan.rounds == rounds + n % 2  # an odd count: each round seats one node out
    assert plan.of_rounds == n - 1 + n % 2
    sends = Counter(s for step in plan.steps for s, _ in step)
    receives = Counter(r for step in plan.steps for _, r in step)
    assert set(sends) == set(receives) == set(names(n))
    assert min(sends.values()) >= 2
    assert min(receives.values()) >= 2
    for step in plan.steps:
        busy = [node for pair in step for node in pair]
        assert len(busy) == len(set(busy))
    assert schedule(names(n), 16, rounds, 7) == plan
    assert schedule(names(n), 16, rounds, 8).steps != plan.steps


def test_a_sample_as_large_as_the_tournament_is_every_pair():
    plan = schedule(names(20), all_up_to=16, sample_rounds=19, seed=0)
    assert not plan.sampled
    assert plan.streams == 20 * 19


def mesh(gbps: dict[tuple[str, str], float | str], nodes=NODES) -> list[Rail]:
    """Every ordered pair at 2.5 Gb/s, but for GBPS's (a figure, or what the sender said)."""
    rails = []
    for s, r in permutations(nodes, 2):
        got = gbps.get((s, r), 2.5)
        path = f"10.252.0.1{s[-1]} -> 10.252.0.1{r[-1]} (TCP)"
        if isinstance(got, str):
            rails.append(Rail(s, r, path, None, got))
        else:
            rails.append(Rail(s, r, path, got, ""))
    return rails


def judge(rails):
    return check_rails(rails, 0.2, "fabric.min_gbps")


def test_one_slow_direction_of_one_pair_names_both_nodes_and_the_direction():
    problems = judge(mesh({("node2", "node3"): 0.02}))
    assert list(problems) == ["node2"]
    (problem,) = problems["node2"]
    assert problem.found == (
        "node2 -> node3 over 10.252.0.12 -> 10.252.0.13 (TCP) carried 0.02 Gb/s; "
        "node3 -> node2 carried 2.50 Gb/s"
    )
    assert problem.remedy.startswith("only this pair, this way: both carry the floor with every")
    assert "`tc filter show` on node2's fabric interface" in problem.remedy


def test_a_node_slow_towards_every_peer_is_named_as_the_node_once():
    slow = {("node4", peer): 0.02 for peer in NODES[:3]}
    problems = judge(mesh(slow))
    assert list(problems) == ["node4"]
    (problem,) = problems["node4"]
    assert problem.found == (
        "node4's streams fell short to every peer: node1 0.02 Gb/s, node2 0.02 Gb/s, "
        "node3 0.02 Gb/s"
    )
    assert problem.remedy.startswith("the cause is node4's egress, not its peers'")


def test_a_node_slow_from_every_peer_is_its_ingress():
    problems = judge(mesh({(peer, "node1"): 0.05 for peer in NODES[1:]}))
    assert list(problems) == ["node1"]
    (problem,) = problems["node1"]
    assert problem.found.startswith("node1's streams fell short from every peer: node2 0.05")
    assert problem.remedy.startswith("the cause is node1's ingress")


def test_a_node_whose_link_is_down_is_one_finding_with_the_bring_up_remedy():
    said = f"error OSError [Errno 101] {UNREACHABLE}"
    down = {("node3", p): said for p in NODES if p != "node3"}
    down |= {(p, "node3"): "error TimeoutError timed out" for p in NODES if p != "node3"}
    problems = judge(mesh(down))
    assert list(problems) == ["node3"]
    (problem,) = problems["node3"]
    assert "to every peer: node1: error OSError" in problem.found
    assert "from every peer: node1: error TimeoutError" in problem.found
    assert problem.remedy.startswith("bring node3's fabric interface up with its address")


def test_a_node_no_peer_reaches_is_its_firewall():
    refused = "error ConnectionRefusedError [Errno 111] Connection refused"
    problems = judge(mesh({(p, "node2"): refused for p in NODES if p != "node2"}))
    (problem,) = problems.pop("node2")
    assert problems == {}
    assert problem.remedy.startswith("let every peer reach node2's ephemeral ports")


def test_every_stream_short_is_the_fabric_once_not_every_node():
    rails = mesh({pair: 0.1 for pair in permutations(NODES, 2)})
    problems = judge(rails)
    assert list(problems) == ["node1"]
    (problem,) = problems["node1"]
    assert problem.found == (
        "every one of the 12 streams between the 4 nodes fell short, carried 0.10 to 0.10 Gb/s"
    )
    assert "or fabric.min_gbps above what this fabric carries" in problem.remedy


def test_two_nodes_down_of_four_are_each_named_and_their_peers_are_not():
    said = f"error OSError [Errno 101] {UNREACHABLE}"
    down = {}
    for node in ("node2", "node4"):
        down |= {(node, p): said for p in NODES if p != node}
        down |= {(p, node): "error TimeoutError timed out" for p in NODES if p != node}
    problems = judge(mesh(down))
    assert sorted(problems) == ["node2", "node4"]
    assert [len(p) for p in problems.values()] == [1, 1]


def test_two_nodes_keep_the_pair_as_the_senders_finding():
    """With one peer, "every peer" is that peer: each slow direction is its sender's."""
    problems = judge(mesh({("node1", "node2"): 0.02, ("node2", "node1"): 0.03}, NODES[:2]))
    assert sorted(problems) == ["node1", "node2"]
    (problem,) = problems["node2"]
    assert problem.found.endswith("carried 0.03 Gb/s; node1 -> node2 carried 0.02 Gb/s")
    assert problem.remedy.startswith("on node2 and node1: `tc qdisc show`")
