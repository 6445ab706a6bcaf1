"""The engine adapters, one per engine.kind: whatever differs by engine is asked of the one
`engine_for` returns (selftest/unit/test_engine_home.py: exactly the plan's kinds)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from infergate.engines.engine import Engine
from infergate.engines.launch import Launch
from infergate.engines.sglang import SGLang
from infergate.engines.vllm_mp import VllmMp
from infergate.engines.vllm_ray import VllmRay
from infergate.plan.model import EngineKind, Inventory

ENGINES: Mapping[EngineKind, Engine] = MappingProxyType(
    {engine.kind: engine for engine in (SGLang(), VllmMp(), VllmRay())}
)


def engine_for(plan: Inventory | EngineKind) -> Engine:
    """The adapter of PLAN's engine: an inventory's, or an engine kind's."""
    return ENGINES[plan if isinstance(plan, str) else plan.engine.kind]


def plan_launch(inventory: Inventory, run_id: str) -> Launch:
    """The launch of the planned engine for this run."""
    return engine_for(inventory).plan_launch(inventory, run_id)
