"""RDMA port health: the error counters (any count since they last cleared is a link that lost
data), the link rate against fabric.rate_gbps, and each HCA's PCIe link against what it can
train at (docs/checks.md#rdma).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from infergate.checks.rdma import planned_ports
from infergate.checks.rdma_sysfs import PcieLink, RdmaPlan, RdmaPort
from infergate.problems import Problem


def check_rdma_health(
    ports: Sequence[RdmaPort], plan: RdmaPlan, rate_gbps: float | None
) -> list[Problem]:
    """The counters, rate and PCIe link of every planned port that is up (a port down is the
    port judge's finding)."""
    planned = [p for p in planned_ports(ports, plan) if p.up]
    return [
        *(_counters(p) for p in planned if any(n for _, n in p.counters)),
        *(_rate(p, rate_gbps) for p in planned if _below(p, rate_gbps)),
        *(_pcie(p, p.pcie) for p in _per_device(planned) if p.pcie and p.pcie.degraded),
    ]


def _counters(port: RdmaPort) -> Problem:
    counted = ", ".join(f"{name} {n}" for name, n in port.counters if n)
    path = f"/sys/class/infiniband/{port.device}/ports/{port.port}/counters"
    return Problem(
        found=f"{port.where} counted {counted}",
        planned="no link errors on a planned HCA port",
        remedy=f"reseat or replace the cable and clean the QSFP ends, then read `grep . {path}/*` "
        "twice a minute apart: a count that still grows is a live fault (the cable or the "
        "far end's port)",
    )


_RATE = re.compile(r"(\d+(?:\.\d+)?) Gb/sec")


def link_rate_gbps(port: RdmaPort) -> float | None:
    """`200 Gb/sec (2X NDR)` -> 200.0; None for a rate sysfs did not give."""
    match = _RATE.match(port.rate)
    return float(match[1]) if match else None


def _below(port: RdmaPort, planned: float | None) -> bool:
    rate = link_rate_gbps(port)
    return planned is not None and rate is not None and rate < planned


def _rate(port: RdmaPort, planned: float | None) -> Problem:
    netdev = port.netdevs[0] if port.netdevs else "NETDEV"
    return Problem(
        found=f"{port.where} links at {port.rate}",
        planned=f"at least {planned:g} Gb/s (fabric.rate_gbps)",
        remedy=f"`sudo ethtool {netdev}` on both ends: a cable or transceiver of a lower rate, or "
        f"a speed forced on one side (`sudo ethtool -s {netdev} autoneg on`)",
    )


def _per_device(ports: Sequence[RdmaPort]) -> list[RdmaPort]:
    """One port of each HCA: the PCIe link is the device's, not the port's."""
    return list({p.device: p for p in reversed(ports)}.values())[::-1]


def _pcie(port: RdmaPort, link: PcieLink) -> Problem:
    bdf = port.pci or "BDF"
    return Problem(
        found=f"{port.device} (PCI {bdf}) trained at {link.text}",
        planned=f"its maximum, {link.max_text}",
        remedy=f"`sudo lspci -vvs {bdf} | grep -e LnkCap -e LnkSta` names the limit: on a DGX "
        "Spark a BIOS before 2026-04 trains the second HCA at x2 (update the BIOS); elsewhere "
        "reseat the card or move it to a slot of full width",
    )
