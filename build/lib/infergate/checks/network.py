"""The fabric: the planned interface, its address and MTU, and what crosses it between nodes."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface

from infergate.plan.model import plan_key
from infergate.problems import Problem, last_line

MTU_KEY = plan_key("fabric.mtu")


@dataclass(frozen=True)
class Interface:
    """A network interface; `up` means administratively up with carrier (LOWER_UP)."""

    name: str
    up: bool
    operstate: str
    mtu: int
    addresses: tuple[IPv4Interface, ...]


def parse_ip_addr_json(text: str) -> dict[str, Interface]:
    """Parse `ip -j addr show` into interfaces by name.

    Sample (one element): ``{"ifname":"fab0","flags":["BROADCAST","UP","LOWER_UP"],"mtu":1500,
    "operstate":"UP","addr_info":[{"family":"inet","local":"10.252.0.11","prefixlen":24}]}``
    """
    interfaces = {}
    for link in json.loads(text):
        flags = set(link.get("flags", ()))
        addresses = tuple(
            IPv4Interface(f"{a['local']}/{a['prefixlen']}")
            for a in link.get("addr_info", ())
            if a.get("family") == "inet"
        )
        name = link["ifname"]
        up = {"UP", "LOWER_UP"} <= flags
        interfaces[name] = Interface(name, up, link.get("operstate", "?"), link["mtu"], addresses)
    return interfaces


def check_fabric_interface(
    interfaces: Mapping[str, Interface], name: str, address: IPv4Interface, key: str
) -> list[Problem]:
    """The planned fabric interface exists, is up with carrier, and holds the planned address.
    KEY is the plan key that names the interface: the node's own where it sets one."""
    iface = interfaces.get(name)
    if iface is None:
        holder = _holder(interfaces, address)
        where = f" ({address.ip} is on {holder})" if holder else ""
        return [
            Problem(
                found=f"no interface {name}; present: {', '.join(sorted(interfaces))}{where}",
                planned=f"{name} with {address}",
                remedy="find the fabric port with `ip -br link` (`ibdev2netdev` on RDMA hosts) "
                f"and fix {key} in the plan, or rename the netplan entry",
            )
        ]
    problems = []
    if not iface.up:
        problems.append(
            Problem(
                found=f"{name} is {iface.operstate} (no carrier or admin down)",
                planned=f"{name} up",
                remedy=f"`{shlex.join(['sudo', 'ip', 'link', 'set', name, 'up'])}`; if it stays "
                f"down check the cable and `{shlex.join(['ethtool', name])}`",
            )
        )
    if address not in iface.addresses:
        have = ", ".join(map(str, iface.addresses)) or "no IPv4 address"
        problems.append(
            Problem(
                found=f"{name} has {have}",
                planned=f"{name} with {address}",
                remedy=f"`{shlex.join(['sudo', 'ip', 'addr', 'add', str(address), 'dev', name])}` "
                "now, and make it "
                "permanent in netplan (/etc/netplan/*.yaml)",
            )
        )
    return problems


def _holder(interfaces: Mapping[str, Interface], address: IPv4Interface) -> str | None:
    return next((i.name for i in interfaces.values() if address in i.addresses), None)


def check_mtu_parity(
    mtus: Mapping[str, int], planned: int | None, interfaces: Mapping[str, str] | None = None
) -> dict[str, list[Problem]]:
    """Every node's fabric MTU equals the plan's (or, with none planned, the most common one);
    `interfaces` (node -> fabric interface) lets the remedy name the interface to set. A
    mismatch passes small pings and fails large transfers later (docs/checks.md#fabric)."""
    expected = planned if planned is not None else Counter(mtus.values()).most_common(1)[0][0]
    basis = MTU_KEY if planned is not None else f"the other nodes; {MTU_KEY} unset"
    return {
        node: [
            Problem(
                found=f"MTU {mtu}",
                planned=f"MTU {expected} ({basis})",
                remedy=f"`{_set_mtu((interfaces or {}).get(node), expected)}` on {node}, "
                "and set `mtu:` in its netplan entry so it survives a reboot",
            )
        ]
        for node, mtu in mtus.items()
        if mtu != expected
    }


_PING_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")


def _set_mtu(interface: str | None, mtu: int) -> str:
    if interface is None:
        # not known to the caller: a placeholder the operator fills in
        return f"sudo ip link set <fabric interface> mtu {mtu}"
    return shlex.join(["sudo", "ip", "link", "set", interface, "mtu", str(mtu)])


def parse_ping(text: str) -> tuple[int, int]:
    """Parse the summary of `ping -c N ...` into (sent, received).

    Sample line: ``2 packets transmitted, 2 received, 0% packet loss, time 1001ms``
    """
    match = _PING_SUMMARY.search(text)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


@dataclass(frozen=True)
class PeerResult:
    """The pings to a `peer` node's fabric address, and what ping printed."""

    peer: str
    address: IPv4Address
    sent: int
    received: int
    output: str


def check_peers_reachable(interface: str, results: list[PeerResult]) -> list[Problem]:
    """Every peer answers ICMP on its fabric address, sent out of the planned interface."""
    return [
        Problem(
            found=f"{r.peer} ({r.address}) answered {r.received} of {r.sent} pings over "
            f"{interface}" + (f": {last_line(r.output, '(no output)')}" if r.sent == 0 else ""),
            planned=f"every peer answers over {interface}",
            remedy="check the link on both ends "
            f"(`{shlex.join(['ip', '-br', 'link', 'show', interface])}`, cable, switch port), "
            f"then `{shlex.join(['ping', '-I', interface, str(r.address)])}`",
        )
        for r in results
        if r.sent == 0 or r.received < r.sent
    ]


# the pings' temporary directory: ${TMPDIR:-/tmp}/infergate-ping.*
PING_DIR_PREFIX = "infergate-ping"


def ping_command(interface: str, addresses: list[IPv4Address]) -> str:
    """Ping every address at once out of one interface; outputs come back in order, each
    followed by a line `@@@`. Their temporary directory is removed on every exit, also when
    the node's deadline (`timeout`'s SIGTERM) ends the pings; only a SIGKILL leaves it."""
    iface = shlex.quote(interface)
    starts = [
        f'ping -n -c 2 -i 0.2 -W 1 -I {iface} {a} > "$d/{i}" 2>&1 &'
        for i, a in enumerate(addresses)
    ]
    show = [f'cat "$d/{i}"; echo @@@' for i in range(len(addresses))]
    setup = [
        f'd=$(mktemp -d "${{TMPDIR:-/tmp}}/{PING_DIR_PREFIX}.XXXXXX") || exit',
        """trap 'rm -rf "$d"' EXIT""",
        "trap 'exit 143' HUP INT TERM",  # a trapped signal ends the script through EXIT
    ]
    return "\n".join([*setup, *starts, "wait", *show])


def split_ping_outputs(text: str) -> list[str]:
    return text.split("@@@\n")
