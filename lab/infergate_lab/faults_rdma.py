"""Faults of the fabric's bandwidth: the node's fab0 shaped to a rate, as a link that trains or
carries far below its speed (a ConnectX-7 at 200G carrying ~13 Gb/s after a bad init,
NVIDIA/dgx-spark-playbooks PR #108); or only what it sends to one peer, as a bad path
between two nodes (a switch port, a cable). Registered in faults.KINDS."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infergate_lab import layout as L
from infergate_lab.fault_kind import FaultKind, Undo
from infergate_lab.layout import NodeSpec
from infergate_lab.shell import LabError, run

if TYPE_CHECKING:
    from infergate_lab.lab import Lab


def _tc(spec: NodeSpec, *args: str) -> None:
    run(["nsenter", f"--net={spec.netns_path}", "tc", *args], timeout=15)


def _bucket(kind: str, mbit: str) -> list[str]:
    """A token bucket of MBIT Mbit/s: a burst of 64 kB and 50 ms of queue, so the rate holds
    from the first packet and no backlog outlasts a measurement (a default queue of 1000
    64 kB segments holds 25 s at 20 Mbit/s, and the next stream's ACKs wait behind it)."""
    if not mbit.isdigit() or int(mbit) < 1:
        raise LabError(f"{kind} takes a rate in Mbit/s (a whole number), got {mbit!r}")
    return ["tbf", "rate", f"{mbit}mbit", "burst", "64kb", "latency", "50ms"]


def _shape_link(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """What the node sends leaves at MBIT Mbit/s at most."""
    _tc(spec, "qdisc", "replace", "dev", L.FABRIC_IFACE, "root", *_bucket("shape-link", args[0]))
    return {}


def _unshape_link(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    _tc(spec, "qdisc", "del", "dev", L.FABRIC_IFACE, "root")


def _shape_pair(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """What the node sends to PEER's fabric address alone leaves at MBIT Mbit/s at most: the
    bucket under an HTB class that a u32 filter on the destination feeds; the rest passes
    unshaped (HTB's default names no class). The lab's kernel has no prio qdisc."""
    peer = L.spec_named(args[0])
    if peer == spec:
        raise LabError(f"shape-pair needs a peer other than {spec.name}")
    bucket = _bucket("shape-pair", args[1])
    dev = ["dev", L.FABRIC_IFACE]
    _tc(spec, "qdisc", "replace", *dev, "root", "handle", "1:", "htb", "default", "ffff")
    _tc(spec, "class", "add", *dev, "parent", "1:", "classid", "1:2", "htb", "rate", "100gbit")
    _tc(spec, "qdisc", "add", *dev, "parent", "1:2", "handle", "20:", *bucket)
    match = ["u32", "match", "ip", "dst", f"{peer.fabric_ip}/32", "flowid", "1:2"]
    _tc(spec, "filter", "add", *dev, "parent", "1:", "protocol", "ip", "prio", "1", *match)
    return {}


KINDS = (
    FaultKind(
        "shape-link",
        ("MBIT",),
        "fab0's egress shaped to MBIT Mbit/s (tc tbf)",
        _shape_link,
        _unshape_link,
    ),
    FaultKind(
        "shape-pair",
        ("PEER", "MBIT"),
        "what fab0 sends to PEER alone shaped to MBIT Mbit/s (tc htb, a u32 filter)",
        _shape_pair,
        _unshape_link,
    ),
)
