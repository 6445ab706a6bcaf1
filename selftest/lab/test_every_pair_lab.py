"""Every pair of nodes measured against the real lab, grown to 4 nodes: the 12 ordered pairs
green over the nodes' veth; one direction of one pair shaped with tc (an HTB class that a u32
filter on the peer's address feeds) is named by both nodes and its direction, every other
pair green; a node whose every stream out is shaped is named as the node, once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infergate_lab import Lab
from infergate_lab import layout as L
from selftest.lab.test_preflight_lab import RAILS
from selftest.suite import SuiteRun, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1200)]

RATE_MBIT = "20"  # 0.02 Gb/s, ten times below the lab plan's floor of 0.2


@pytest.fixture(scope="module")
def four_nodes(lab: Lab) -> Iterator[Lab]:
    """The session's lab with node3 and node4 added (node1 and node2 left as they run), back
    to its two nodes after, whatever failed: the session's later tests need that lab."""
    try:
        lab.up(4)
        yield lab
    finally:
        lab.clear_faults()
        lab.up(2)


def rails_only(pytester: pytest.Pytester) -> SuiteRun:
    return run_suite(pytester, "-m", "preflight", "-k", "rails", inventory=L.INVENTORY_FILE)


def rails_red_under(lab: Lab, pytester: pytest.Pytester, *fault: str) -> str:
    """The rail test's failure under FAULT (cleared after), the only red of the run."""
    lab.apply_fault(*fault)
    try:
        run = rails_only(pytester)
    finally:
        lab.clear_faults()
    assert run.red() == {RAILS}, run.output
    return run.message(RAILS)


def test_every_pair_green_on_four_nodes(four_nodes, pytester):
    run = rails_only(pytester)
    assert run.outcomes[RAILS].status == "passed", run.output
    assert run.red() == set(), run.output


def test_one_shaped_direction_names_the_pair_and_its_direction(four_nodes, pytester):
    text = rails_red_under(four_nodes, pytester, "shape-pair", "node2", "node3", RATE_MBIT)
    assert "every ordered pair of 4 nodes" in text
    assert "node2 (10.251.0.12): 1 problem(s)" in text
    assert "problem(s)" not in text.replace("node2 (10.251.0.12): 1 problem(s)", ""), text
    pair = "node2 -> node3 over 10.252.0.12 -> 10.252.0.13 (TCP) carried 0.0"
    assert pair in text
    assert "; node3 -> node2 carried " in text
    assert "only this pair, this way" in text


def test_a_node_shaped_towards_every_peer_is_named_as_the_node(four_nodes, pytester):
    text = rails_red_under(four_nodes, pytester, "shape-link", "node4", RATE_MBIT)
    assert "node4 (10.251.0.14): 1 problem(s)" in text
    assert "problem(s)" not in text.replace("node4 (10.251.0.14): 1 problem(s)", ""), text
    assert "node4's streams fell short to every peer: node1 0.0" in text
    assert "the cause is node4's egress, not its peers'" in text
    assert " -> " not in text, text  # no pair of node4's repeated on its own
