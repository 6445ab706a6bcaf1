"""The lab's two networks, made with iproute2.

management: bridge iglab-mgmt in the host namespace (10.251.0.1/24), a veth per node
            (host side iglab-mK, node side mgmt0 10.251.0.(10+K)/24); the controller's SSH.
fabric:     bridge fabbr inside namespace iglab-fabric, a veth per node (fabK there, fab0
            10.252.0.(10+K)/24 in the node): the "RoCE" link, unreachable from the host.
Every step checks first, so running it again changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from infergate_lab import layout as L
from infergate_lab.layout import NodeSpec
from infergate_lab.shell import run
from infergate_lab.state import LabState, Link, NodeRecord


def ip(netns: str, *args: str, check: bool = True) -> str:
    """`ip [-n NETNS] ARGS`; "" is the host namespace."""
    ns = ["-n", netns] if netns else []
    return run(["ip", *ns, *args], timeout=15, check=check).stdout


def link_exists(link: Link) -> bool:
    netns, name = link
    if netns and not (L.NETNS_DIR / netns).exists():
        return False
    return bool(ip(netns, "-o", "link", "show", "dev", name, check=False).strip())


def netns_exists(name: str) -> bool:
    return (L.NETNS_DIR / name).exists()


def _add_netns(name: str) -> bool:
    if netns_exists(name):
        return False
    ip("", "netns", "add", name)
    ip(name, "link", "set", "lo", "up")
    return True


def ensure_shared(state: LabState) -> None:
    """The management bridge and the fabric namespace with its bridge."""
    if not Path("/run/netns").exists():
        state.shared_dirs.append("/run/netns")  # `ip netns add` makes it (and mounts it)
    mgmt: Link = ("", L.MGMT_BRIDGE)
    if not link_exists(mgmt):
        ip("", "link", "add", L.MGMT_BRIDGE, "type", "bridge")
        state.links.append(mgmt)
        state.save()
    ip("", "addr", "replace", L.MGMT_HOST_ADDR, "dev", L.MGMT_BRIDGE)
    ip("", "link", "set", L.MGMT_BRIDGE, "up")
    if _add_netns(L.FABRIC_NETNS):
        state.netns.append(L.FABRIC_NETNS)
        state.save()
    if not link_exists((L.FABRIC_NETNS, L.FABRIC_BRIDGE)):
        ip(L.FABRIC_NETNS, "link", "add", L.FABRIC_BRIDGE, "type", "bridge")
    ip(L.FABRIC_NETNS, "link", "set", L.FABRIC_BRIDGE, "up")


def ensure_kernel_room(state: LabState, n: int) -> None:
    """Raise the kernel settings a lab of n nodes needs (layout.kernel_room) where they are
    lower, their values before recorded once; back to those when the lab needs none."""
    wanted = L.kernel_room(n)
    if not wanted:
        restore_sysctls(state)
        return
    paths = {key: L.SYSCTL_DIR / key for key in wanted}
    before = state.sysctls or {key: p.read_text().strip() for key, p in paths.items()}
    state.sysctls = before
    state.save()  # recorded first: `down` restores them whatever happens next
    for key, least in reversed(wanted.items()):  # gc_thresh3 before the two below it
        paths[key].write_text(str(max(least, int(before[key]))))


def restore_sysctls(state: LabState) -> None:
    """The kernel settings the lab raised, back to their values before (gc_thresh1 first)."""
    for key, value in state.sysctls.items():
        (L.SYSCTL_DIR / key).write_text(value)
    state.sysctls = {}
    state.save()


def ensure_node(spec: NodeSpec, rec: NodeRecord, state: LabState) -> None:
    """The node's namespace and its two links, addressed and up."""
    if _add_netns(spec.netns):
        rec.netns = spec.netns
        state.save()
    mgmt: Link = ("", spec.host_veth)
    if not link_exists(mgmt):
        ip(
            "",
            "link",
            "add",
            spec.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            L.MGMT_IFACE,
            "netns",
            spec.netns,
        )
        rec.links.append(mgmt)
        state.save()
    ip("", "link", "set", spec.host_veth, "master", L.MGMT_BRIDGE, "up")
    fab: Link = (L.FABRIC_NETNS, spec.fabric_veth)
    if not link_exists(fab):
        ip(
            L.FABRIC_NETNS,
            "link",
            "add",
            spec.fabric_veth,
            "type",
            "veth",
            "peer",
            "name",
            L.FABRIC_IFACE,
            "netns",
            spec.netns,
        )
        rec.links.append(fab)
        state.save()
    ip(L.FABRIC_NETNS, "link", "set", spec.fabric_veth, "master", L.FABRIC_BRIDGE, "up")
    _address(spec.netns, L.MGMT_IFACE, f"{spec.mgmt_ip}/24")
    _address(spec.netns, L.FABRIC_IFACE, f"{spec.fabric_ip}/24", mtu=L.FABRIC_MTU)


def _address(netns: str, dev: str, cidr: str, mtu: int | None = None) -> None:
    ip(netns, "addr", "replace", cidr, "dev", dev)
    extra = ["mtu", str(mtu)] if mtu else []
    ip(netns, "link", "set", dev, *extra, "up")


def set_fabric(spec: NodeSpec, up: bool | None = None, mtu: int | None = None) -> None:
    """Change the node's fab0 as an operator's mistake would: state and/or MTU."""
    args = (["mtu", str(mtu)] if mtu else []) + ([] if up is None else ["up" if up else "down"])
    ip(spec.netns, "link", "set", L.FABRIC_IFACE, *args)


def fabric_mtu(spec: NodeSpec) -> int:
    out = ip(spec.netns, "-o", "link", "show", "dev", L.FABRIC_IFACE)
    return int(out.split(" mtu ")[1].split()[0])


def delete_link(link: Link) -> None:
    if link_exists(link):
        ip(link[0], "link", "del", link[1])


def delete_netns(name: str) -> None:
    if netns_exists(name):
        ip("", "netns", "del", name)


def forget(gone: NodeSpec, remaining: list[NodeSpec]) -> None:
    """Drop a removed node's addresses from the other nodes' and the host's ARP caches, so a
    node made again later under the same address (with a new MAC) is reached at once."""
    ip("", "neigh", "flush", "to", gone.mgmt_ip, check=False)
    for spec in remaining:
        for address in (gone.mgmt_ip, gone.fabric_ip):
            ip(spec.netns, "neigh", "flush", "to", address, check=False)
