"""A launch, as data: the steps an engine needs, in its order, each gate with its deadline.

An engine adapter (vllm_mp.py, sglang.py, vllm_ray.py) turns the inventory into a `Launch`;
the executor (deploy/executor.py) performs it. Nothing here touches a node.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace

from infergate.engines.container import ContainerSpec
from infergate.engines.signatures import Signature
from infergate.plan.apikey import ENGINE_ENV, engine_keys, flags_without_key
from infergate.plan.model import Inventory, Node
from infergate.waiting import Deadline


@dataclass(frozen=True)
class Start:
    """Create and start one container on a node through its Docker Engine API, with the run's
    labels; its env, secrets and all, travels in the API request, never on a command line."""

    node: str
    container: str  # its name
    spec: ContainerSpec  # Engine.container: the one the preflight's probe runs
    command: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Exec:
    """Start a process inside a running container, its output into the container's log."""

    node: str
    container: str
    argv: tuple[str, ...]

    def detached(self) -> list[str]:
        """ARGV with its output sent to the container's own (PID 1's), where the log is
        followed: a detached exec's output goes nowhere."""
        return ["sh", "-c", f"exec {shlex.join(self.argv)} >>/proc/1/fd/1 2>&1"]


# What to do when a gate's deadline passes: each gate carries its own, set by the adapter
DIST_INIT_REMEDY = (
    "every rank must reach the dist-init address over the fabric: start every node, "
    "then `pytest -m preflight -k 'fabric or rendezvous or pinning'`"
)
# every rank started and began its process-group set-up, none finished it: what blocks is
# between the ranks (the store, or their own connections after it), not a node left down
INIT_BEGAN_REMEDY = (
    "every rank began process-group set-up and none finished, so the ranks cannot reach each "
    "other: a firewall that lets only the dist-init port in (`iptables -S` on each node), "
    "GLOO_SOCKET_IFNAME naming another interface, or a host address the peers cannot reach "
    "(SGLANG_HOST_IP, VLLM_HOST_IP); `pytest -m preflight -k 'rendezvous or rails'` names the "
    "node"
)
WEIGHTS_REMEDY = (
    "check the model's disk and memory on that node, or raise thresholds.weights_timeout_s"
)
SLOW_REMEDY = "read the head's log in the evidence; raise the threshold if the model is just slow"


@dataclass(frozen=True)
class Milestone:
    """A line every one of `nodes` logs when it reaches this point of the launch."""

    name: str
    pattern: str
    nodes: tuple[str, ...]
    deadline: Deadline
    remedy: str = SLOW_REMEDY  # when a node is not past it by the deadline
    # (pattern, remedy): the line a rank logs on entering this step, and the remedy when every
    # node short of it logged that line (they got that far, which rules out what lies before)
    began: tuple[str, str] | None = None

    def reached_by(self, line: str) -> bool:
        return re.search(self.pattern, line) is not None

    def remedy_for(self, logs: list[list[str]]) -> str:
        """The remedy for the nodes short of this milestone, each by its log lines."""
        if self.began and logs:
            pattern, remedy = self.began
            if all(any(re.search(pattern, ln) for ln in lines) for lines in logs):
                return remedy
        return self.remedy


@dataclass(frozen=True)
class ClusterJoined:
    """The engine's own cluster manager (Ray) lists every planned node: a responsive head
    alone is not a cluster."""

    name: str
    node: str
    command: tuple[str, ...]  # run in the node's engine container: `ray status`
    nodes: int
    gpus: int
    deadline: Deadline
    remedy: str = SLOW_REMEDY


@dataclass(frozen=True)
class HttpReady:
    """The API answers on the head: each path 200, and /v1/models lists the served name."""

    name: str
    paths: tuple[str, ...]
    deadline: Deadline
    remedy: str = SLOW_REMEDY


Gate = Milestone | ClusterJoined | HttpReady


Step = Start | Exec | Gate


@dataclass(frozen=True)
class Launch:
    engine: str
    run_id: str
    endpoint: str  # http://HEAD:PORT, the OpenAI API's base without /v1
    served_name: str
    containers: dict[str, str]  # node name -> container name
    steps: tuple[Step, ...]
    fatal: tuple[Signature, ...]  # signatures.signatures_for(engine): what ends the launch
    milestones: tuple[Milestone, ...] = field(init=False)

    def __post_init__(self) -> None:
        found = tuple(s for s in self.steps if isinstance(s, Milestone))
        object.__setattr__(self, "milestones", found)

    def fatal_in(self, line: str) -> Signature | None:
        """The first of the fatal signatures (the most specific: they are listed so) in LINE."""
        return next((f for f in self.fatal if f.search(line)), None)

    def retrying_in(self, line: str) -> Signature | None:
        """The fatal signature whose retry LINE shows: the engine still tries, and says why."""
        return next((f for f in self.fatal if f.retried_in(line)), None)


@dataclass(frozen=True)
class Deadlines:
    """The inventory's launch deadlines (starting points, not measurements:
    docs/notes.md#launch-deadlines)."""

    dist_init: Deadline
    weights: Deadline
    ready: Deadline
    cluster_join: Deadline


def deadlines(inventory: Inventory) -> Deadlines:
    t = inventory.thresholds
    keys = ("dist_init_timeout_s", "weights_timeout_s", "ready_timeout_s", "cluster_join_timeout_s")
    return Deadlines(*(Deadline(getattr(t, k), f"thresholds.{k}") for k in keys))


def container_name(run_id: str, node: Node) -> str:
    return f"infergate-{node.name}-{run_id}"


def key_in_env(inventory: Inventory, variable: str = ENGINE_ENV) -> Inventory:
    """The plan with the engine's one `--api-key` moved from its flags into VARIABLE of its
    env, where `ps` and `docker inspect`'s Args cannot show it (vLLM reads VLLM_API_KEY).
    Several keys stay flags: one variable holds one key."""
    keys = [k.value for k in engine_keys(inventory.engine.flags, {})]
    if len(keys) != 1:
        return inventory
    env = {**inventory.engine.env, variable: keys[0]}
    engine = replace(inventory.engine, flags=flags_without_key(inventory.engine.flags), env=env)
    return replace(inventory, engine=engine)


def endpoint(inventory: Inventory) -> str:
    return f"http://{inventory.head.address}:{inventory.engine.api_port}"


def workers(inventory: Inventory) -> list[Node]:
    return [n for n in inventory.nodes if n.name != inventory.head.name]


def ordered(inventory: Inventory) -> list[Node]:
    """The head first (rank 0), then the others in plan order."""
    return [inventory.head, *workers(inventory)]


def names(nodes: list[Node]) -> tuple[str, ...]:
    return tuple(n.name for n in nodes)
