"""RDMA ports: where the plan names HCAs, each port is ACTIVE, carries a RoCE v2 IPv4 GID (the
one NCCL_IB_GID_INDEX pins, if set), and a DGX Spark port's twin HCAs are both in use: with
one, NCCL reaches ~3 GB/s instead of ~24 (docs/checks.md#rdma).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from ipaddress import IPv4Address

from infergate.checks.rdma_sysfs import (
    Gid,
    HcaToken,
    RdmaPlan,
    RdmaPort,
    parse_nccl_ib_hca,
)
from infergate.problems import Problem


def check_rdma(ports: Sequence[RdmaPort], plan: RdmaPlan) -> list[Problem]:
    """All three RDMA judges, for the preflight test."""
    return [
        *check_rdma_ports_active(ports, plan),
        *check_roce_v2_gids(ports, plan),
        *check_twin_hcas_planned(ports, plan),
    ]


def check_rdma_ports_active(ports: Sequence[RdmaPort], plan: RdmaPlan) -> list[Problem]:
    """Every HCA the plan names exists and its port is ACTIVE with phys_state LinkUp (for an
    NCCL_IB_HCA prefix, one port it matches suffices: NCCL skips the others); an exclusion
    list leaves out no HCA of nodes[].fabric.hcas."""
    # one per name, though the node's HCAs and NCCL_IB_HCA repeat it
    absent: dict[str, Problem] = {}
    down: dict[tuple[str, int], RdmaPort] = {}
    for source, token in plan.named():
        found = [p for p in ports if token.matches(p)]
        if not found:
            absent.setdefault(token.text, _absent(source, token, ports))
        elif token.exact or not any(p.up for p in found):
            down.update({(p.device, p.port): p for p in found if not p.up})
    return [*absent.values(), *map(_down, down.values()), *_excluded(ports, plan)]


def _absent(source: str, token: HcaToken, ports: Sequence[RdmaPort]) -> Problem:
    devices = ", ".join(sorted({p.device for p in ports})) or "none"
    if any(HcaToken(token.name, None, token.exact).matches(p) for p in ports):
        what = f"no port {token.port} on {token.name}"
    else:
        what = f"no RDMA device {'' if token.exact else 'starting with '}{token.name}"
    return Problem(
        found=f"{what} (present: {devices})",
        planned=f"{source} names {token.text}",
        remedy=f"`ibdev2netdev` lists this node's RDMA devices and their netdevs: fix "
        f"{source.partition('=')[0]}; if it lists none, load the RDMA driver "
        "(`lsmod | grep mlx5_ib`) or give the node its HCA",
    )


def _down(port: RdmaPort) -> Problem:
    netdev = port.netdevs[0] if port.netdevs else "NETDEV"
    phys = port.phys_state_name
    return Problem(
        found=f"{port.where} is {port.state_name}, {phys}",
        planned="every planned HCA port ACTIVE with phys_state LinkUp",
        remedy=f"`ibdev2netdev` must show `{port.device} port {port.port} ==> {netdev} (Up)`: "
        f"`{shlex.join(['sudo', 'ip', 'link', 'set', netdev, 'up'])}`; if phys_state stays {phys}, "
        "check the cable "
        "(seated, the same QSFP port on both nodes)",
    )


def _excluded(ports: Sequence[RdmaPort], plan: RdmaPlan) -> list[Problem]:
    selection = parse_nccl_ib_hca(plan.nccl_ib_hca)
    dropped = [
        t.text
        for t in plan.hca_tokens
        if any(t.matches(p) and not selection.selects(p) for p in ports)
    ]
    if not selection.exclude or not dropped:
        # an inclusion list that leaves one out is the pinning check's finding
        return []
    return [
        Problem(
            found=f"NCCL_IB_HCA={plan.nccl_ib_hca} excludes {', '.join(dropped)}",
            planned=f"{plan.hcas_key}: {', '.join(plan.hcas)}, every one used by NCCL",
            remedy=f"drop {', '.join(dropped)} from the exclusion, or from {plan.hcas_key}",
        )
    ]


def planned_ports(ports: Sequence[RdmaPort], plan: RdmaPlan) -> list[RdmaPort]:
    """The ports the plan names (its HCAs, or what NCCL_IB_HCA selects where it names none)."""
    tokens = [t for _, t in plan.named()]
    if tokens:
        return [p for p in ports if any(t.matches(p) for t in tokens)]
    return [p for p in ports if parse_nccl_ib_hca(plan.nccl_ib_hca).selects(p)]


def check_roce_v2_gids(ports: Sequence[RdmaPort], plan: RdmaPlan) -> list[Problem]:
    """Each active planned RoCE port has a RoCE v2 IPv4 GID: the fabric address's on the HCAs
    of the fabric interface, its own netdev's on a twin; NCCL_IB_GID_INDEX, when set, is the
    index of that GID on every one of them."""
    planned = [p for p in planned_ports(ports, plan) if p.link_layer == "Ethernet"]
    if not planned:
        # absent HCAs are the port judge's finding; InfiniBand has no RoCE GIDs
        return []
    if not any(plan.interface in p.netdevs for p in planned):
        return [_not_on_fabric(planned, plan)]
    try:
        index = int(plan.gid_index) if plan.gid_index else None
    except ValueError:
        return [_pin_problem(f"NCCL_IB_GID_INDEX={plan.gid_index} is not a GID index")]
    problems = []
    for port in (p for p in planned if p.up):
        want = plan.address if plan.interface in port.netdevs else None
        v2 = [g for g in port.gids if g.type == "RoCE v2" and g.ipv4 and want in (None, g.ipv4)]
        if not v2:
            problems.append(_no_v2_gid(port, want))
        elif index is not None and index >= 0 and index not in {g.index for g in v2}:
            problems.append(_pinned_elsewhere(port, index, v2, plan.gid_index))
    return problems


def _not_on_fabric(planned: Sequence[RdmaPort], plan: RdmaPlan) -> Problem:
    bound = ", ".join(p.where for p in planned)
    return Problem(
        found=f"no planned HCA drives {plan.interface}: {bound}",
        planned=f"the HCA of {plan.interface} ({plan.address}) in {plan.hcas_key} and NCCL_IB_HCA",
        remedy=f"`ibdev2netdev` shows which HCA drives {plan.interface}: plan that one "
        "(on a Spark, with its twin)",
    )


def _no_v2_gid(port: RdmaPort, want: IPv4Address | None) -> Problem:
    """`want`: the fabric address, on the HCA of the fabric interface; None on a twin (its own
    netdev and address, as NVIDIA's connect-two-sparks playbook gives both)."""
    netdev = port.netdevs[0] if port.netdevs else "NETDEV"
    seen = ", ".join(f"{g.index} {g.type} {g.text}" for g in port.gids) or "none"
    return Problem(
        found=f"{port.where} has no RoCE v2 {f'GID of {want}' if want else 'IPv4 GID'} "
        f"(GIDs: {seen})",
        planned=f"a RoCE v2 GID of {want or 'an IPv4 address'} on every planned HCA",
        remedy=f"put {want or 'its address'} on {netdev} "
        f"(`{shlex.join(['ip', '-br', 'addr', 'show', netdev])}`) and "
        "persist it in netplan (nmcli changes on DGX OS vanish on reboot): the kernel adds its "
        "GIDs; without one NCCL falls back to a link-local GID",
    )


def _pinned_elsewhere(port: RdmaPort, index: int, v2: Sequence[Gid], raw: str) -> Problem:
    at = next((g for g in port.gids if g.index == index), None)
    there = f"{at.type} {at.text}" if at else "empty"
    where = ", ".join(str(g.index) for g in v2)
    return _pin_problem(
        f"NCCL_IB_GID_INDEX={raw}, but GID {index} of {port.device} is {there}; "
        f"its RoCE v2 GID {v2[0].text} is at {where}"
    )


def _pin_problem(found: str) -> Problem:
    return Problem(
        found=found,
        planned="NCCL_IB_GID_INDEX unset, or the index of the RoCE v2 IPv4 GID on every HCA",
        remedy="remove NCCL_IB_GID_INDEX from the engine env so NCCL picks each HCA's RoCE v2 "
        "GID itself: a pinned index drifts (on a Spark the RoCE v2 GID moved from 3 to 4 on one "
        "HCA only and NCCL failed in ibv_modify_qp: GitHub "
        "tonyd2wild/DeepSeek-v4-Flash-Vision-Exp-DSpark-1M-NVFP4-KV-2x-DGX-Spark#38)",
    )


_PCI = re.compile(r"([0-9a-f]{4,}):([0-9a-f]{2}:[0-9a-f]{2}\.[0-7])")


def fabric_twins(ports: Sequence[RdmaPort], interface: str) -> list[str]:
    """The HCAs of the fabric port: those bound to the interface, and the socket-direct twin of
    each (same adapter, the same bus:device.function in another PCI domain)."""
    anchors = [p for p in ports if interface in p.netdevs]
    twins = [p for p in ports if any(_socket_direct(a, p) for a in anchors)]
    return list(dict.fromkeys(p.device for p in [*anchors, *twins]))


def _socket_direct(a: RdmaPort, b: RdmaPort) -> bool:
    pa, pb = _PCI.fullmatch(a.pci), _PCI.fullmatch(b.pci)
    same_adapter = bool(a.sys_image_guid) and a.sys_image_guid == b.sys_image_guid
    return bool(pa and pb and same_adapter and pa[1] != pb[1] and pa[2] == pb[2])


def check_twin_hcas_planned(ports: Sequence[RdmaPort], plan: RdmaPlan) -> list[Problem]:
    """Where the fabric port is two HCAs (a DGX Spark's rocep1s0f1 and roceP2p1s0f1), both are
    in nodes[].fabric.hcas and selected by NCCL_IB_HCA; nothing to judge where the port has
    one HCA."""
    twins = fabric_twins(ports, plan.interface)
    if len(twins) < 2:
        return []
    listed = {t.name for t in plan.hca_tokens}
    selection = parse_nccl_ib_hca(plan.nccl_ib_hca)
    unlisted = [d for d in twins if plan.hcas and d not in listed]
    unselected = [
        d
        for d in twins
        if plan.nccl_ib_hca and not any(p.device == d and selection.selects(p) for p in ports)
    ]
    left_out = [(plan.hcas_key, unlisted), (f"NCCL_IB_HCA={plan.nccl_ib_hca}", unselected)]
    return [
        Problem(
            found=f"{source} leaves out {', '.join(names)}, twin HCA of {plan.interface}'s port",
            planned=f"both HCAs of the fabric port: {', '.join(twins)}",
            remedy=f"{plan.hcas_key}: [{', '.join(twins)}] and NCCL_IB_HCA={','.join(twins)}: a "
            "Spark port is two PCIe x4 HCAs; with one, NCCL reaches ~3 GB/s instead of ~24 "
            "(dgx-spark-playbooks #102)",
        )
        for source, names in left_out
        if names
    ]
