"""The kernel's ephemeral port range, and the ports the engine binds against it.

The ports are the adapter's (Engine.planned_ports): what a rank binds on a worker is as fatal
there as on the head: "Address already in use" on the worker only (gpustack#6019,
https://github.com/gpustack/gpustack/issues/6019, #4312 for a taken VLLM_PORT).
"""

from __future__ import annotations

from dataclasses import dataclass

from infergate.engines.ports import Bound
from infergate.problems import Problem


@dataclass(frozen=True)
class PortRange:
    """The kernel's ephemeral port range, and the reserved ports it never hands out."""

    low: int
    high: int
    reserved: frozenset[int]

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
