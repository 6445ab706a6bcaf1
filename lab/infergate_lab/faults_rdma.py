"""Faults of the fabric's bandwidth: the node's fab0 shaped to a rate, as a link that trains or
carries far below its speed (a ConnectX-7 at 200G carrying ~13 Gb/s after a bad init,
NVIDIA/dgx-spark-playbooks PR #108). Registered in faults.KINDS."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infergate_lab import layout as L
from infergate_lab.fault_kind import FaultKind, Undo
from infergate_lab.layout import NodeSpec
from infergate_lab.shell import LabError, run

if TYPE_CHECKING:
    from infergate_lab.lab import Lab


def _tc(spec: NodeSpec, *args: str) -> None:
    run(["nsenter", f"--net={spec.netns_path}", "tc", "qdisc", *args], timeout=15)


def _shape_link(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """A token bucket on fab0's egress: what the node sends leaves at MBIT Mbit/s at most."""
    if not args[0].isdigit() or int(args[0]) < 1:
        raise LabError(f"shape-link takes a rate in Mbit/s (a whole number), got {args[0]!r}")
    # a burst of 64 kB and 50 ms of queue: the rate holds from the first packet
    _tc(
        spec,
        "replace",
        "dev",
        L.FABRIC_IFACE,
        "root",
        "tbf",
        "rate",
        f"{args[0]}mbit",
        "burst",
        "64kb",
        "latency",
        "50ms",
    )
    return {}


def _unshape_link(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    _tc(spec, "del", "dev", L.FABRIC_IFACE, "root")


KINDS = (
    FaultKind(
        "shape-link",
        ("MBIT",),
        "fab0's egress shaped to MBIT Mbit/s (tc tbf)",
        _shape_link,
        _unshape_link,
    ),
)
