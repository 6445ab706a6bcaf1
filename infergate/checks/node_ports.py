"""The fixed ports the engine binds on each node, and the kernel's ephemeral range against them.

Read from the launch adapters (infergate/deploy/): what a rank binds on a worker is as fatal
there as on the head: "Address already in use" on the worker only (gpustack#6019,
https://github.com/gpustack/gpustack/issues/6019, #4312 for a taken VLLM_PORT).
"""

from __future__ import annotations

from dataclasses import dataclass

from infergate.plan.model import Inventory, Node, plan_key
from infergate.problems import Problem

# Ray's own fixed defaults, which `ray start` (deploy/vllm_ray.py) does not override:
# https://docs.ray.io/en/latest/ray-core/configure.html#ports-configurations and
# https://docs.ray.io/en/master/ray-core/internals/port-service-discovery.html
RAY_CLIENT_SERVER_PORT = 10001  # head only
RAY_DASHBOARD_PORT = 8265  # head only
RAY_DASHBOARD_AGENT_PORT = 52365  # every node
RAY_WORKER_PORTS = (10002, 19999)  # --min-worker-port / --max-worker-port, every node


@dataclass(frozen=True)
class Bound:
    what: str  # what the engine binds it for
    key: str  # where the plan sets it ("" for an engine's own default)


def planned_ports(inventory: Inventory, node: Node) -> dict[int, Bound]:
    """Every fixed TCP port the engine's processes bind on NODE, as the adapters launch them."""
    e, head = inventory.engine, node.name == inventory.head.name
    ports: dict[int, Bound] = {}
    env_port = inventory.node_env(node).get("VLLM_PORT", "")
    if e.kind != "sglang" and env_port.isdigit():  # vLLM's first internal (ZMQ, torch) port
        ports[int(env_port)] = Bound("VLLM_PORT", node.key_of("env.VLLM_PORT"))
    if e.kind == "vllm-ray":
        ports[RAY_DASHBOARD_AGENT_PORT] = Bound("Ray dashboard agent", "")
        if head:
            ports[RAY_CLIENT_SERVER_PORT] = Bound("Ray client server", "")
            ports[RAY_DASHBOARD_PORT] = Bound("Ray dashboard", "")
    # SGLang's ranks >= 1 serve a health check on --port (launch_dummy_health_check_server)
    if head or e.kind == "sglang":
        ports[e.api_port] = Bound("API server", plan_key("engine.api_port"))
    if head:
        rendezvous = "Ray GCS" if e.kind == "vllm-ray" else "dist-init rendezvous"
        ports[e.dist_init_port] = Bound(rendezvous, plan_key("engine.dist_init_port"))
    return ports


@dataclass(frozen=True)
class PortRange:
    low: int
    high: int
    reserved: frozenset[int]  # net.ipv4.ip_local_reserved_ports: never handed out

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.low <= port <= self.high


def parse_port_range(text: str) -> PortRange:
    """Parse `cat ip_local_port_range ip_local_reserved_ports` (in /proc/sys/net/ipv4).

    Sample (the lab's nodes, the kernel's defaults): ``32768\t60999`` then an empty line;
    reserved ports read like ``8000,29500-29510``.
    """
    lines = [*text.splitlines(), ""]
    low, high = (int(w) for w in lines[0].split())
    return PortRange(low, high, frozenset(_port_list(lines[1])))


def _port_list(text: str) -> list[int]:
    ports: list[int] = []
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        ports += range(int(first), int(last or first) + 1)
    return ports


def check_outside_ephemeral_range(span: PortRange, planned: dict[int, Bound]) -> list[Problem]:
    """The ports the plan fixes lie outside the range the kernel hands out to outgoing
    connections (or are reserved): else any connection may take one first."""
    return [
        Problem(
            found=f"TCP {port} ({bound.what}, {bound.key}) inside the ephemeral port range "
            f"{span.low}-{span.high} and not reserved",
            planned=f"TCP {port} outside net.ipv4.ip_local_port_range or reserved",
            remedy=f"`sudo sysctl -w net.ipv4.ip_local_reserved_ports={_reserve(span, port)}` "
            f"(and in /etc/sysctl.d/ to keep it), or move {bound.key} below {span.low}",
        )
        for port, bound in sorted(planned.items())
        if bound.key and port in span and port not in span.reserved
    ]


def _reserve(span: PortRange, port: int) -> str:
    """The reserved list with PORT added, in the kernel's own form (`8000,29500-29510`):
    sysctl replaces the list, it does not append to it."""
    runs: list[list[int]] = []
    for p in sorted({*span.reserved, port}):
        if runs and runs[-1][1] == p - 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)
