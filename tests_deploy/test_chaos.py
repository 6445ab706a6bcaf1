"""Opt-in failure detection (`-m chaos`; never in the default run): each action strikes one
worker rank of a launch of its own, under light load, and the head's probes are timed until
they notice. The point: whether a liveness probe on /health can be trusted on this engine and
version (docs/chaos.md)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from infergate.deploy.chaos import Blind, Timeline, check_detection
from infergate.fixtures.report import fail_on
from infergate.plan.model import ChaosAction, Inventory, Node

pytestmark = [pytest.mark.chaos, pytest.mark.xdist_group("deployment")]

Struck = Callable[[ChaosAction], Timeline]


def test_probes_notice_a_killed_rank(
    struck: Struck, inventory: Inventory, chaos_node: Node, blind_health: Blind
) -> None:
    """After `docker kill` of a worker rank's container, the head's /health fails within
    chaos.max_health_detect_s (and a generation within max_generation_detect_s, if set)."""
    timeline = struck("kill")
    fail_on(chaos_node, check_detection(timeline, inventory.chaos, blind_health))


def test_probes_notice_a_paused_rank(
    struck: Struck, inventory: Inventory, chaos_node: Node, blind_health: Blind
) -> None:
    """After `docker pause` of a worker rank's container (a frozen rank: no exit, no
    answer), the head's probes fail within the plan's detection limits."""
    timeline = struck("pause")
    fail_on(chaos_node, check_detection(timeline, inventory.chaos, blind_health))


def test_probes_notice_a_cut_fabric(
    struck: Struck, inventory: Inventory, chaos_node: Node, blind_health: Blind
) -> None:
    """With a worker's fabric link down for chaos.cut_s (the node restores it itself), the
    head's probes fail within the plan's detection limits."""
    timeline = struck("cut")
    fail_on(chaos_node, check_detection(timeline, inventory.chaos, blind_health))
