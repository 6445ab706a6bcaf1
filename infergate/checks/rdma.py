"""RDMA ports: where the plan names HCAs, each port is ACTIVE, carries a RoCE v2 IPv4 GID (the
one NCCL_IB_GID_INDEX pins, if set), and a DGX Spark port's twin HCAs are both in use.

Field notes §1.2 and check 9: a Spark's QSFP port is two HCAs (rocep1s0f1 on PCI 0000:01:00.1,
roceP2p1s0f1 on 0002:01:00.1, each with its own netdev); with one, NCCL reaches ~3 GB/s instead
of ~24. A pinned NCCL_IB_GID_INDEX=3 failed on one HCA only after its RoCE v2 GID moved to 4.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from ipaddress import IPv4Address, IPv6Address

from infergate.inventory import NodeFabric
from infergate.problems import Problem

HCAS_KEY = "nodes[*].fabric.hcas"


@dataclass(frozen=True)
class Gid:
    index: int
    gid: IPv6Address
    type: str  # "RoCE v2" or "IB/RoCE v1", as gid_attrs/types/N says
    netdev: str

    @property
    def ipv4(self) -> IPv4Address | None:
        return self.gid.ipv4_mapped

    @property
    def text(self) -> str:
        return f"::ffff:{self.ipv4}" if self.ipv4 else str(self.gid)


@dataclass(frozen=True)
class RdmaPort:
    device: str
    port: int
    state: str  # "4: ACTIVE"
    phys_state: str  # "5: LinkUp"
    rate: str
    link_layer: str  # "Ethernet" (RoCE) or "InfiniBand"
    netdevs: tuple[str, ...]
    pci: str  # "0000:01:00.1"; "" where the device is not a PCI function
    sys_image_guid: str
    gids: tuple[Gid, ...] = ()

    @property
    def up(self) -> bool:
        return _name(self.state) == "ACTIVE" and _name(self.phys_state) == "LinkUp"

    @property
    def where(self) -> str:
        return f"{self.device} port {self.port} (on {'/'.join(self.netdevs) or 'no netdev'})"


def _name(numbered: str) -> str:
    """`4: ACTIVE` -> `ACTIVE`."""
    return numbered.partition(": ")[2] or numbered


def parse_rdma_sysfs(text: str) -> list[RdmaPort]:
    """Parse the `rdma-ports` probe section: tab-separated `port` and `gid` lines read from
    /sys/class/infiniband/DEV/ports/N (state, phys_state, rate, link_layer, the netdev from
    gid_attrs/ndevs/0 or DEV/device/net, the PCI function, sys_image_guid) and, for every
    non-zero gids/IDX, the GID with gid_attrs/types/IDX and gid_attrs/ndevs/IDX.

    Sample lines (tabs shown as `|`):
    ``port|rocep1s0f1|1|4: ACTIVE|5: LinkUp|200 Gb/sec (2X NDR)|Ethernet|enp1s0f1np1|0000:01:00.1|fc4c:ea03:00f9:4230``
    ``gid|rocep1s0f1|1|3|0000:0000:0000:0000:0000:ffff:c0a8:c80c|RoCE v2|enp1s0f1np1``
    """  # noqa: E501
    ports: dict[tuple[str, int], RdmaPort] = {}
    gids: dict[tuple[str, int], list[Gid]] = {}
    for line in filter(None, text.splitlines()):
        kind, *fields = line.split("\t")
        if kind == "port" and len(fields) == 9:
            dev, num, state, phys, rate, layer, nets, pci, guid = fields
            key = (dev, int(num))
            netdevs = tuple(filter(None, nets.split(",")))
            ports[key] = RdmaPort(*key, state, phys, rate, layer, netdevs, pci, guid)
        elif kind == "gid" and len(fields) == 6:
            dev, num, index, value, gid_type, netdev = fields
            gids.setdefault((dev, int(num)), []).append(
                Gid(int(index), IPv6Address(value), gid_type, netdev)
            )
        else:
            raise ValueError(f"not an rdma-ports line: {line[:120]!r}")
    return [
        replace(p, gids=tuple(sorted(gids.get(k, ()), key=lambda g: g.index)))
        for k, p in sorted(ports.items())
    ]


@dataclass(frozen=True)
class HcaToken:
    """One entry of NCCL_IB_HCA (or of fabric.hcas): a device name or prefix, maybe a port."""

    name: str
    port: int | None
    exact: bool

    def matches(self, port: RdmaPort) -> bool:
        named = port.device == self.name if self.exact else port.device.startswith(self.name)
        return named and self.port in (None, port.port)

    @property
    def text(self) -> str:
        return self.name + (f":{self.port}" if self.port is not None else "")


@dataclass(frozen=True)
class HcaFilter:
    """NCCL_IB_HCA as NCCL reads it: a leading `^` excludes, then `=` makes names exact
    (otherwise prefixes); `name:port` picks one port."""

    exclude: bool
    tokens: tuple[HcaToken, ...]

    def selects(self, port: RdmaPort) -> bool:
        hit = not self.tokens or any(t.matches(port) for t in self.tokens)
        return hit != self.exclude


def parse_nccl_ib_hca(value: str) -> HcaFilter:
    exclude = value.startswith("^")
    rest = value[1:] if exclude else value
    exact = rest.startswith("=")
    return HcaFilter(exclude, _tokens(rest[1:] if exact else rest, exact))


def _tokens(value: str, exact: bool) -> tuple[HcaToken, ...]:
    parts = (entry.strip().partition(":") for entry in value.split(","))
    return tuple(
        HcaToken(name, int(port) if port.isdigit() else None, exact)
        for name, _, port in parts
        if name
    )


@dataclass(frozen=True)
class RdmaPlan:
    """What one node's plan says about RDMA: its HCAs, the engine env's NCCL_IB_HCA and
    NCCL_IB_GID_INDEX ("" when unset), and its fabric address and interface."""

    hcas: tuple[str, ...]
    nccl_ib_hca: str
    gid_index: str
    address: IPv4Address
    interface: str

    @property
    def names_hcas(self) -> bool:
        return bool(self.hcas or self.nccl_ib_hca)

    @property
    def hca_tokens(self) -> tuple[HcaToken, ...]:
        return _tokens(",".join(self.hcas), exact=True)

    def named(self) -> Iterator[tuple[str, HcaToken]]:
        """Every HCA the plan names, with where it does: fabric.hcas exactly, NCCL_IB_HCA as
        NCCL matches it (an exclusion list names none)."""
        yield from ((HCAS_KEY, t) for t in self.hca_tokens)
        selection = parse_nccl_ib_hca(self.nccl_ib_hca)
        if not selection.exclude:
            yield from ((f"NCCL_IB_HCA={self.nccl_ib_hca}", t) for t in selection.tokens)


def rdma_plan(fabric: NodeFabric, env: Mapping[str, str]) -> RdmaPlan:
    """The RDMA part of a node's plan, from its fabric entry and its resolved engine env."""
    return RdmaPlan(
        hcas=fabric.hcas,
        nccl_ib_hca=env.get("NCCL_IB_HCA", ""),
        gid_index=env.get("NCCL_IB_GID_INDEX", "").strip(),
        address=fabric.address.ip,
        interface=fabric.interface,
    )


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
    list leaves out no HCA of fabric.hcas."""
    absent: dict[str, Problem] = {}  # one per name, though fabric.hcas and NCCL_IB_HCA repeat it
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
    phys = _name(port.phys_state)
    return Problem(
        found=f"{port.where} is {_name(port.state)}, {phys}",
        planned="every planned HCA port ACTIVE with phys_state LinkUp",
        remedy=f"`ibdev2netdev` must show `{port.device} port {port.port} ==> {netdev} (Up)`: "
        f"`sudo ip link set {netdev} up`; if phys_state stays {phys}, check the cable "
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
        return []  # an inclusion list that leaves one out is the pinning check's finding
    return [
        Problem(
            found=f"NCCL_IB_HCA={plan.nccl_ib_hca} excludes {', '.join(dropped)}",
            planned=f"{HCAS_KEY}: {', '.join(plan.hcas)}, every one used by NCCL",
            remedy=f"drop {', '.join(dropped)} from the exclusion, or from {HCAS_KEY}",
        )
    ]


def _planned(ports: Sequence[RdmaPort], plan: RdmaPlan) -> list[RdmaPort]:
    tokens = [t for _, t in plan.named()]
    if tokens:
        return [p for p in ports if any(t.matches(p) for t in tokens)]
    return [p for p in ports if parse_nccl_ib_hca(plan.nccl_ib_hca).selects(p)]


def check_roce_v2_gids(ports: Sequence[RdmaPort], plan: RdmaPlan) -> list[Problem]:
    """Each active planned RoCE port has a RoCE v2 IPv4 GID: the fabric address's on the HCAs
    of the fabric interface, its own netdev's on a twin; NCCL_IB_GID_INDEX, when set, is the
    index of that GID on every one of them."""
    planned = [p for p in _planned(ports, plan) if p.link_layer == "Ethernet"]
    if not planned:
        return []  # absent HCAs are the port judge's finding; InfiniBand has no RoCE GIDs
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
        planned=f"the HCA of {plan.interface} ({plan.address}) in {HCAS_KEY} and NCCL_IB_HCA",
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
        remedy=f"put {want or 'its address'} on {netdev} (`ip -br addr show {netdev}`) and "
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
        "HCA only and NCCL failed in ibv_modify_qp; field notes §1.2)",
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
    in fabric.hcas and selected by NCCL_IB_HCA; nothing to judge where the port has one HCA."""
    twins = fabric_twins(ports, plan.interface)
    if len(twins) < 2:
        return []
    listed = {t.name for t in plan.hca_tokens}
    selection = parse_nccl_ib_hca(plan.nccl_ib_hca)
    unlisted = [d for d in twins if plan.hcas and d not in listed]
    unselected = [
        d for d in twins
        if plan.nccl_ib_hca and not any(p.device == d and selection.selects(p) for p in ports)
    ]  # fmt: skip
    left_out = [(HCAS_KEY, unlisted), (f"NCCL_IB_HCA={plan.nccl_ib_hca}", unselected)]
    return [
        Problem(
            found=f"{source} leaves out {', '.join(names)}, twin HCA of {plan.interface}'s port",
            planned=f"both HCAs of the fabric port: {', '.join(twins)}",
            remedy=f"{HCAS_KEY}: [{', '.join(twins)}] and NCCL_IB_HCA={','.join(twins)}: a "
            "Spark port is two PCIe x4 HCAs; with one, NCCL reaches ~3 GB/s instead of ~24 "
            "(dgx-spark-playbooks #102)",
        )
        for source, names in left_out
        if names
    ]
