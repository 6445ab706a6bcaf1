"""RDMA as sysfs shows it and as the plan names it: ports with their GIDs (the `rdma-ports`
probe section), NCCL_IB_HCA read as NCCL reads it, and a node's RDMA plan. The judges are in
infergate.checks.rdma.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from ipaddress import IPv4Address, IPv6Address

from infergate.plan.model import Node


@dataclass(frozen=True)
class Gid:
    """A port's non-zero GID; `type` is "RoCE v2" or "IB/RoCE v1", as gid_attrs/types/N says."""

    index: int
    gid: IPv6Address
    type: str
    netdev: str

    @property
    def ipv4(self) -> IPv4Address | None:
        return self.gid.ipv4_mapped

    @property
    def text(self) -> str:
        return f"::ffff:{self.ipv4}" if self.ipv4 else str(self.gid)


@dataclass(frozen=True)
class PcieLink:
    """The HCA's PCIe link as sysfs words it: `32.0 GT/s PCIe` and `4`; "" where unreadable."""

    speed: str
    width: str
    max_speed: str
    max_width: str

    @property
    def degraded(self) -> bool:
        """Trained below what the device can: a slower generation or fewer lanes."""
        pairs = ((_gts(self.speed), _gts(self.max_speed)), (_int(self.width), _int(self.max_width)))
        return any(now is not None and most is not None and now < most for now, most in pairs)

    @property
    def text(self) -> str:
        return f"{self.speed or '?'} x{self.width or '?'}"

    @property
    def max_text(self) -> str:
        return f"{self.max_speed or '?'} x{self.max_width or '?'}"


def _gts(speed: str) -> float | None:
    """`32.0 GT/s PCIe` -> 32.0; `Unknown` or "" -> None."""
    head = speed.split(" ", 1)[0]
    return float(head) if head.replace(".", "", 1).isdigit() else None


def _int(width: str) -> int | None:
    return int(width) if width.isdigit() else None


@dataclass(frozen=True)
class RdmaPort:
    """An RDMA port as sysfs words it (`state` "4: ACTIVE", `link_layer` "Ethernet" for RoCE,
    `pci` "0000:01:00.1" or "" where it is no PCI function), with the error counters that could
    be read and its HCA's PCIe link (None: no `pcie` line, as from an old probe)."""

    device: str
    port: int
    state: str
    phys_state: str
    rate: str
    link_layer: str
    netdevs: tuple[str, ...]
    pci: str
    sys_image_guid: str
    gids: tuple[Gid, ...] = ()
    counters: tuple[tuple[str, int], ...] = ()
    pcie: PcieLink | None = None

    @property
    def state_name(self) -> str:
        return _name(self.state)

    @property
    def phys_state_name(self) -> str:
        return _name(self.phys_state)

    @property
    def up(self) -> bool:
        return self.state_name == "ACTIVE" and self.phys_state_name == "LinkUp"

    @property
    def where(self) -> str:
        return f"{self.device} port {self.port} (on {'/'.join(self.netdevs) or 'no netdev'})"


def _name(numbered: str) -> str:
    """`4: ACTIVE` -> `ACTIVE`."""
    return numbered.partition(": ")[2] or numbered


def parse_rdma_sysfs(text: str) -> list[RdmaPort]:
    """Parse the `rdma-ports` probe section (probe.RDMA_PORTS): tab-separated `port`, `gid`,
    `counters` and `pcie` lines read from /sys/class/infiniband/DEV (docs/checks.md#rdma).

    Sample lines (tabs shown as `|`):
    ``port|rocep1s0f1|1|4: ACTIVE|5: LinkUp|200 Gb/sec (2X NDR)|Ethernet|enp1s0f1np1|0000:01:00.1|fc4c:ea03:00f9:4230``
    ``gid|rocep1s0f1|1|3|0000:0000:0000:0000:0000:ffff:c0a8:c80c|RoCE v2|enp1s0f1np1``
    ``counters|rocep1s0f1|1|symbol_error=0,link_downed=0,port_rcv_errors=0``
    ``pcie|rocep1s0f1|1|32.0 GT/s PCIe|4|32.0 GT/s PCIe|4``
    """  # noqa: E501
    ports: dict[tuple[str, int], RdmaPort] = {}
    gids: dict[tuple[str, int], list[Gid]] = {}
    counters: dict[tuple[str, int], tuple[tuple[str, int], ...]] = {}
    links: dict[tuple[str, int], PcieLink] = {}
    for line in filter(None, text.splitlines()):
        kind, *fields = line.split("\t")
        if kind == "counters" and len(fields) == 3:
            pairs = (f.partition("=") for f in filter(None, fields[2].split(",")))
            counters[fields[0], int(fields[1])] = tuple((k, int(n)) for k, _, n in pairs)
        elif kind == "pcie" and len(fields) == 6:
            links[fields[0], int(fields[1])] = PcieLink(*fields[2:])
        elif kind == "port" and len(fields) == 9:
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
        replace(
            p,
            gids=tuple(sorted(gids.get(k, ()), key=lambda g: g.index)),
            counters=counters.get(k, ()),
            pcie=links.get(k),
        )
        for k, p in sorted(ports.items())
    ]


@dataclass(frozen=True)
class HcaToken:
    """One entry of NCCL_IB_HCA or nodes[].fabric.hcas: a device name or prefix, maybe a port."""

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
    NCCL_IB_GID_INDEX ("" when unset), and its fabric address and interface; `hcas_key` is
    the node's key that lists the HCAs (nodes[1].fabric.hcas), which remedies name."""

    hcas: tuple[str, ...]
    nccl_ib_hca: str
    gid_index: str
    address: IPv4Address
    interface: str
    hcas_key: str

    @property
    def names_hcas(self) -> bool:
        return bool(self.hcas or self.nccl_ib_hca)

    @property
    def hca_tokens(self) -> tuple[HcaToken, ...]:
        return _tokens(",".join(self.hcas), exact=True)

    def named(self) -> Iterator[tuple[str, HcaToken]]:
        """Every HCA the plan names, with where it does: the node's HCAs exactly, NCCL_IB_HCA
        as NCCL matches it (an exclusion list names none)."""
        yield from ((self.hcas_key, t) for t in self.hca_tokens)
        selection = parse_nccl_ib_hca(self.nccl_ib_hca)
        if not selection.exclude:
            yield from ((f"NCCL_IB_HCA={self.nccl_ib_hca}", t) for t in selection.tokens)


def rdma_plan(node: Node, env: Mapping[str, str]) -> RdmaPlan:
    """The RDMA part of a node's plan, from its fabric entry and its resolved engine env."""
    fabric = node.fabric
    return RdmaPlan(
        hcas=fabric.hcas,
        nccl_ib_hca=env.get("NCCL_IB_HCA", ""),
        gid_index=env.get("NCCL_IB_GID_INDEX", "").strip(),
        address=fabric.address.ip,
        interface=fabric.interface,
        hcas_key=node.key_of("fabric.hcas"),
    )
