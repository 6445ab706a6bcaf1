"""The per-rail bandwidth test against the real lab: the TCP form over the nodes' veth, red
when tc shapes one node's fab0 (naming it, the pair and the measured against the planned
rate); green without the fault is test_preflight_lab's healthy run."""

from __future__ import annotations

import re

import pytest

from selftest.suite import run_suite
from selftest.test_preflight_lab import HOST_ONLY, RAILS

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]


def test_shaped_link_names_the_sending_node_and_its_rate(engine_lab, pytester):
    engine_lab.apply_fault("shape-link", "node2", "20")
    run = run_suite(pytester, *HOST_ONLY)
    assert run.red() == {RAILS}, run.output
    text = run.message(RAILS)
    assert "per-rail bandwidth by TCP" in text
    assert "node2 (10.251.0.12): 1 problem(s)" in text
    carried = re.search(r"node2 -> node1 over 10\.252\.0\.12 -> 10\.252\.0\.11 \(TCP\) carried "
                        r"(\d+\.\d+) Gb/s", text)  # fmt: skip
    assert carried, text
    assert float(carried[1]) < 0.03  # 20 Mbit/s, and the bucket's one burst
    assert "planned at least 0.2 Gb/s per rail (fabric.min_gbps)" in text
    assert "node1 (10.251.0.11)" not in text  # node1's own stream to node2 passed
    engine_lab.clear_faults()
    again = run_suite(pytester, *HOST_ONLY, "-k", "rails")
    assert again.red() == set(), again.output
    assert RAILS in again.outcomes, again.output
