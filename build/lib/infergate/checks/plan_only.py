"""The judges that need only the plan, no node reached: the preflight runs each as its test,
and `infergate plan check` runs them all. PLAN_CHECKS is their one home, by test name (the
catalogue's key: infergate.catalogue.CHECKS)."""

from __future__ import annotations

from collections.abc import Callable

from infergate.checks.pinning import check_pinning_planned, required_pinning
from infergate.engines.registry import engine_for
from infergate.plan.model import Inventory
from infergate.problems import Problem

PlanJudge = Callable[[Inventory], dict[str, list[Problem]]]  # problems by node name


def judge_pinning(inventory: Inventory) -> dict[str, list[Problem]]:
    """Each node's engine env pins every socket the engine opens to the fabric."""
    gpus = any(n.gpus for n in inventory.nodes)
    rdma = any(n.fabric.hcas for n in inventory.nodes)
    needed = required_pinning(engine_for(inventory), gpus, rdma)
    return {n.name: check_pinning_planned(inventory.node_env(n), needed) for n in inventory.nodes}


PLAN_CHECKS: dict[str, PlanJudge] = {
    "test_engine_env_pins_the_fabric": judge_pinning,
}
