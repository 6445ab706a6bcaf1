"""The ports used after the rendezvous: a sample dialled between every pair of nodes, and the
firewall rules that explain a port that does not answer. Those ports are ephemeral, so a
firewall that lets dist-init through still hangs the launch (docs/checks.md#firewall).
The rules are read, never changed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from infergate.checks.node_ports import PortRange
from infergate.engines.ports import PortSpan
from infergate.problems import Problem

# its two ends and its middle: where a rule's bounds cut a range
SAMPLE_PER_RANGE = 3


def sample_ports(
    ephemeral: PortRange, spans: Sequence[PortSpan], avoid: set[int]
) -> dict[int, str]:
    """A few ports of each range a node will listen on after the rendezvous (port -> range):
    the ephemeral range and the engine's own SPANS (Engine.listen_spans), none of them in
    AVOID (what it already listens on, the plan's own ports)."""
    ranges = [(f"ephemeral range {ephemeral.low}-{ephemeral.high}", ephemeral.low, ephemeral.high)]
    ranges += [(f"{s.what} {s.low}-{s.high}", s.low, s.high) for s in spans]
    sample: dict[int, str] = {}
    for name, low, high in ranges:
        skip = avoid | ephemeral.reserved | set(sample)
        for wanted in (low, (low + high) // 2, high)[:SAMPLE_PER_RANGE]:
            port = next((p for p in _inward(wanted, low, high) if p not in skip), None)
            if port is not None:
                sample[port] = name
                skip.add(port)
    return sample


def _inward(port: int, low: int, high: int) -> range:
    """From PORT towards the middle of [low, high], at most 16 ports."""
    return range(port, port - 16, -1) if port == high and high > low else range(port, port + 16)


@dataclass(frozen=True)
class Rules:
    """What a node's firewall says about incoming traffic: per tool, the lines that drop or
    reject (maybe none), or why its rules could not be read."""

    blocking: dict[str, list[str]]
    unknown: dict[str, str]

    def describe(self) -> str:
        said = [
            f"{tool} drops/rejects with `{'`, `'.join(lines[:4])}`"
            for tool, lines in self.blocking.items()
            if lines
        ]
        said += [f"{tool} unknown ({why})" for tool, why in self.unknown.items()]
        return "; ".join(said) or "neither iptables nor nft shows a rule that drops"

    def short(self) -> str:
        """For the summary table: how many lines drop, or `unknown` when no tool could say."""
        lines = sum(len(found) for found in self.blocking.values())
        if lines:
            return f"{lines} dropping"
        return "none dropping" if self.blocking else "unknown"


# chains that never see a packet addressed to this host (or only Docker's bridged ones)
_NOT_INPUT = re.compile(r"^(OUTPUT|FORWARD|POSTROUTING|DOCKER\S*|\S*-output|\S*-forward)$")
# a drop of packets conntrack calls invalid never stops a new connection
_INVALID = re.compile(r"ctstate INVALID|ct state invalid", re.IGNORECASE)


def parse_iptables_rules(text: str) -> list[str]:
    """The lines of `iptables -S` that drop or reject what comes in: the INPUT policy and
    DROP/REJECT rules in INPUT and the chains it may jump to (ufw's, a distro's own).

    Sample (a lab node under firewall-after-rendezvous): ``-A INPUT -i fab0 -p tcp -m tcp
    --tcp-flags FIN,SYN,RST,ACK SYN -j DROP``
    """
    lines = []
    for line in text.splitlines():
        words = line.split()
        policy = words == ["-P", "INPUT", "DROP"]
        inbound = words[:1] == ["-A"] and len(words) > 1 and not _NOT_INPUT.match(words[1])
        drops = re.search(r"-j (DROP|REJECT)\b", line) and not _INVALID.search(line)
        if policy or (inbound and drops):
            lines.append(line.strip())
    return lines


def parse_nft_rules(text: str) -> list[str]:
    """The lines of `nft list ruleset` that drop or reject in chains hooked to input (or in
    base-less chains, which an input chain may jump to): `policy drop;`, `... drop`, `reject`.

    Sample (nftables wiki, "Simple ruleset for a server"): ``type filter hook input priority
    filter; policy drop;``
    """
    lines, chain, hooked_elsewhere = [], "", False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("chain "):
            chain, hooked_elsewhere = line.split()[1], False
        elif "hook " in line:
            hooked_elsewhere = re.search(r"hook (input|prerouting)\b", line) is None
            if "policy drop" in line and not hooked_elsewhere:
                lines.append(f"{chain}: {line}")
        elif chain and not hooked_elsewhere and re.search(r"\b(drop|reject)\b", line):
            lines += [] if _INVALID.search(line) else [f"{chain}: {line}"]
    return lines


def firewall_rules(iptables: tuple[int, str], nft: tuple[int, str]) -> Rules:
    """Both tools' readings, each (exit status, output); a failed read is `unknown`, saying
    why (not installed, not root)."""
    blocking, unknown = {}, {}
    for tool, (rc, text), parse in (
        ("iptables", iptables, parse_iptables_rules),
        ("nft", nft, parse_nft_rules),
    ):
        if rc == 0:
            blocking[tool] = parse(text)
        else:
            unknown[tool] = _why(rc, text)
    return Rules(blocking, unknown)


def _why(rc: int, text: str) -> str:
    if rc == 127:
        return "not installed"
    said = " ".join(text.split())[:160]
    if re.search(r"Permission denied|Operation not permitted|must be root", said):
        return f"needs root: {said}"
    return f"exit {rc}: {said}"


@dataclass(frozen=True)
class Dial:
    """One dial of a sampled port from `source`, the node that dialled; `range` is the range
    the port samples.

    Sample results: ``ok 0.4``, ``error TimeoutError timed out``
    """

    source: str
    port: int
    range: str
    result: str


def check_listened(listened: tuple[int, ...], refused: dict[int, str]) -> list[Problem]:
    """The node could listen on some of its sampled ports (each refused one is skipped)."""
    if listened:
        return []
    said = "; ".join(f"TCP {port}: {why}" for port, why in refused.items()) or "(no answer)"
    return [
        Problem(
            found=f"no sampled port to listen on: {said}",
            planned="a temporary listener on a few free ports of the ranges used after the "
            "rendezvous",
            remedy="`python3 -V` on the node (the listener is python3), and "
            "`ss -Htlnp` for what holds those ports",
        )
    ]


def check_after_rendezvous(
    address: str, dials: list[Dial], rules: Rules, fabric: str
) -> list[Problem]:
    """The node's sampled ports answered every peer over the fabric; those that did not are
    named with the peer, and the remedy leads with what the node's firewall shows."""
    failed = [d for d in dials if not d.result.startswith("ok")]
    if not failed:
        return []
    by_source: dict[str, list[Dial]] = {}
    for d in failed:
        by_source.setdefault(d.source, []).append(d)
    said = "; ".join(
        f"from {source}: TCP {', '.join(str(d.port) for d in ds)} ({_ranges(ds)}) "
        f"{ds[0].result.removeprefix('error ')}"
        for source, ds in by_source.items()
    )
    return [
        Problem(
            found=f"{address} does not answer on ports used after the rendezvous, {said}",
            planned=f"every peer reaches {address} on any TCP port over the fabric "
            "(NCCL, Gloo, ZMQ and Ray listen on ephemeral ports once dist-init has answered)",
            remedy=_remedy(address, failed, rules, fabric),
        )
    ]


def _remedy(address: str, failed: list[Dial], rules: Rules, fabric: str) -> str:
    """Unreachable from the peer's own routing table is no firewall of this node: the route
    first; anything else (a timeout, a refusal, icmp-prohibited) leads with the rules."""
    if all("Network is unreachable" in d.result for d in failed):
        return (
            f"the peers have no route to {address}: `ip route get {address}` and "
            f"`ip -br link` on {', '.join(dict.fromkeys(d.source for d in failed))}"
        )
    return (
        f"this node's firewall: {rules.describe()}; let the fabric in: "
        f"`sudo iptables -I INPUT -s {fabric} -j ACCEPT` (ufw: `sudo ufw allow from {fabric}`)"
    )


def _ranges(dials: list[Dial]) -> str:
    return ", ".join(dict.fromkeys(d.range for d in dials))
