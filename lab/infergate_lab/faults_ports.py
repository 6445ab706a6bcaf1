"""Faults on the ports the engine's ranks use after the rendezvous. Registered in faults.KINDS."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infergate_lab import layout as L
from infergate_lab.fault_kind import FaultKind, Undo
from infergate_lab.layout import NodeSpec
from infergate_lab.shell import LabError, run

if TYPE_CHECKING:
    from infergate_lab.lab import Lab


def _after_rendezvous_rules(port: str) -> list[list[str]]:
    """A firewall opened for the rendezvous only: new TCP connections from the fabric are
    dropped but those to PORT. Only SYNs: the replies to the node's own dials still pass,
    so the node still reaches its peers (and the head's dist-init port) itself."""
    fabric = ["INPUT", "-i", L.FABRIC_IFACE, "-p", "tcp"]
    return [[*fabric, "--dport", port, "-j", "ACCEPT"], [*fabric, "--syn", "-j", "DROP"]]


def _iptables(spec: NodeSpec, *args: str) -> None:
    run(["nsenter", f"--net={spec.netns_path}", "iptables", "-w", *args], timeout=15)


def _firewall_after_rendezvous(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    accept, drop = _after_rendezvous_rules(args[0])
    _iptables(spec, "-I", accept[0], "1", *accept[1:])
    try:
        _iptables(spec, "-I", drop[0], "2", *drop[1:])
    except LabError:  # no half-made fault: the ACCEPT alone would outlive it
        _iptables(spec, "-D", *accept)
        raise
    return {"port": args[0]}


def _open_firewall(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    for rule in _after_rendezvous_rules(undo["port"]):
        _iptables(spec, "-D", *rule)


KINDS = (
    FaultKind(
        "firewall-after-rendezvous",
        ("PORT",),
        "new TCP from the fabric dropped in the node, but to PORT (the dist-init port)",
        _firewall_after_rendezvous,
        _open_firewall,
    ),
)
