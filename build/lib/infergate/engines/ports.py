"""The TCP ports an engine's processes bind, each with what binds it and the plan key that
sets it. Each adapter lists its own (Engine.planned_ports) beside its launch commands, both
from the plan's ports and `is_head`; selftest/unit/test_engine_home.py holds the two together."""

from __future__ import annotations

from dataclasses import dataclass

from infergate.plan.model import Inventory, Node, plan_key


@dataclass(frozen=True)
class Bound:
    what: str  # what the engine binds it for
    key: str  # where the plan sets it ("" for an engine's own default)


@dataclass(frozen=True)
class PortSpan:
    """A range of ports the engine's processes listen on once the rendezvous is done."""

    what: str
    low: int
    high: int


API = Bound("API server", plan_key("engine.api_port"))
DIST_INIT = Bound("dist-init rendezvous", plan_key("engine.dist_init_port"))


def is_head(inventory: Inventory, node: Node) -> bool:
    return node.name == inventory.head.name
