"""The per-rail bandwidth test against the real lab: the TCP form over the nodes' veth, red
when tc shapes one node's fab0 (naming it, the pair and the measured against the planned
rate; on 4 nodes, test_every_pair_lab); green without the fault is test_preflight_lab's
healthy run, and every later run of the host-level tests, each asserting its exact red set,
finds the shape cleared."""

from __future__ import annotations

import re

import pytest

from selftest.lab.test_preflight_lab import HOST_ONLY, RAILS
from selftest.suite import run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]


def test_shaped_link_names_the_pair_and_the_rates(engine_lab, pytester):
    """node2's egress shaped: its stream to node1 carries the shaped rate, and node1's stream
    to node2, measured in a step of its own, is not slowed by node2's bucket (when both ran
    at once, its ACKs queued behind node2's data: 0.05 Gb/s in one run)."""
    engine_lab.apply_fault("shape-link", "node2", "20")
    run = run_suite(pytester, *HOST_ONLY)
    assert run.red() == {RAILS}, run.output
    text = run.message(RAILS)
    assert "per-rail bandwidth by TCP, every ordered pair of 2 nodes" in text
    assert "node2 (10.251.0.12): 1 problem(s)" in text
    assert "node1 (10.251.0.11)" not in text
    assert "planned at least 0.2 Gb/s per rail (fabric.min_gbps)" in text
    assert carried(text, "node2", "node1") < 0.03, text  # 20 Mbit/s, and the bucket's burst
    assert float(text.split("; node1 -> node2 carried ")[1].split()[0]) >= 0.2, text


def carried(text: str, sender: str, receiver: str) -> float:
    """The rate the failure gives for SENDER's stream to RECEIVER over the lab's fabric."""
    ip = {"node1": r"10\.252\.0\.11", "node2": r"10\.252\.0\.12"}
    path = rf"{sender} -> {receiver} over {ip[sender]} -> {ip[receiver]} \(TCP\)"
    found = re.search(rf"{path} carried (\d+\.\d+) Gb/s", text)
    assert found, text
    return float(found[1])
