"""An engine adapter: everything that differs by engine, one object per engine.kind
(registry.engine_for finds it). Checks, fixtures and tests ask it; no module outside
infergate/engines/ compares the kind (selftest/unit/test_engine_home.py)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import ClassVar

from infergate.engines.container import ContainerSpec, engine_container
from infergate.engines.labels import PLAN_LABEL, RUN_LABEL
from infergate.engines.launch import Launch, Start, container_name
from infergate.engines.ports import Bound, PortSpan
from infergate.plan.model import EngineKind, Inventory, Node, flag_value

EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class ImageProbe:
    """What the in-image probe (checks/scripts/in_image.py) reads the engine's facts with,
    handed to it as its first argument (`argument()`, a JSON object)."""

    imports: tuple[str, ...]  # the engine's modules, their versions read as they import
    registry: str  # the module whose ModelRegistry lists the architectures it serves
    parser: str  # the probe's function that makes the server's parser: vllm_parser, ...
    model_flag: str  # the option before the model's path there; "" where it is positional

    def argument(self) -> str:
        return json.dumps(asdict(self))


class Engine(ABC):
    """One engine, as the plan's engine.kind names it: its launch, the ports it binds, and
    what the checks need to know of it."""

    kind: ClassVar[EngineKind]
    package: ClassVar[str]  # the Python package the image imports: vllm, sglang
    # the other engine's flags and its name, only to name a rejected flag's owner (the image's
    # own parser judges); each as recorded in the lab (selftest/data/parsers/)
    foreign_flags: ClassVar[frozenset[str]]
    foreign_owner: ClassVar[str]
    host_ip_var: ClassVar[str]  # the address each rank advertises, pinned to the fabric
    memory_flag: ClassVar[str]  # the fraction of GPU memory it takes: this flag,
    memory_default: ClassVar[float]  # else this
    context_flag: ClassVar[str]  # the context length it serves
    cpu_kv_env: ClassVar[str | None]  # a CPU rank's KV cache in GiB; None: it sizes it itself
    no_cpu_kv_budget: ClassVar[str]  # why a CPU rank then has no KV budget to judge
    probe: ClassVar[ImageProbe]
    container_env: ClassVar[Mapping[str, str]] = EMPTY  # under the plan's engine.env
    listen_spans: ClassVar[tuple[PortSpan, ...]] = ()  # besides the ephemeral range
    metrics_hint: ClassVar[str] = ""  # what its /metrics needs, said when none was recorded
    # the names of conformance.BAD_REQUESTS it answers by design, each with why
    answers_by_design: ClassVar[Mapping[str, str]] = EMPTY
    # where its /health stays 200 after a rank died, and the probe that notices (chaos.Blind)
    health_issue: ClassVar[str]
    liveness_probe: ClassVar[str]

    @abstractmethod
    def plan_launch(self, inventory: Inventory, run_id: str) -> Launch:
        """The launch of this engine for this run."""

    @abstractmethod
    def planned_ports(self, inventory: Inventory, node: Node) -> dict[int, Bound]:
        """Every fixed TCP port the engine's processes bind on NODE, as plan_launch starts
        them (what a rank binds on a worker is as fatal there as on the head)."""

    def planned_context(self, flags: Sequence[str]) -> str | None:
        """The context length FLAGS give the engine, as written (`32768`, `32k`, `-1`): the
        value of its context_flag; None where they set none."""
        return flag_value(flags, self.context_flag)

    def container(self, inventory: Inventory, node: Node) -> ContainerSpec:
        """NODE's engine container: the launch's, and the in-image probe's."""
        return engine_container(inventory, node, self.container_env)

    def start(self, inventory: Inventory, node: Node, run_id: str, command: list[str]) -> Start:
        """COMMAND in NODE's engine container, with the labels that mark it as this run's."""
        labels = ((RUN_LABEL, run_id), (PLAN_LABEL, inventory.name))
        spec = self.container(inventory, node)
        return Start(node.name, container_name(run_id, node), spec, tuple(command), labels)
