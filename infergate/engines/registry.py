"""The engine adapters, by the inventory's engine.kind."""

from __future__ import annotations

from collections.abc import Callable

from infergate.engines import sglang, vllm_mp, vllm_ray
from infergate.engines.launch import Launch
from infergate.plan.model import EngineKind, Inventory

ADAPTERS: dict[EngineKind, Callable[[Inventory, str], Launch]] = {
    "sglang": sglang.plan_launch,
    "vllm": vllm_mp.plan_launch,
    "vllm-ray": vllm_ray.plan_launch,
}


def plan_launch(inventory: Inventory, run_id: str) -> Launch:
    """The launch of the planned engine for this run."""
    return ADAPTERS[inventory.engine.kind](inventory, run_id)
