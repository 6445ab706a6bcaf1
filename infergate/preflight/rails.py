"""Each rail measured, node to node: every ordered pair of nodes (or a seeded sample of
pairs, past fabric.all_pairs_up_to nodes) in steps where no node is in two streams at once
(infergate.checks.pairs). `ib_write_bw` per planned HCA pair where perftest is on every
node, else one TCP stream over the fabric addresses.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from infergate.checks import bandwidth as bw
from infergate.checks.facts import Sections, perftest_of
from infergate.checks.pairs import Schedule, schedule
from infergate.checks.ports import stop_listener_command
from infergate.plan.model import Inventory, Node, plan_key
from infergate.preflight.per_node import PerNode, every_value, fact, value
from infergate.remote.fanout import on_every_node
from infergate.remote.ssh import Outcome, Remote

IB_PORT = 12000  # the playbook's `-p 12000`; the HCA pair of index i uses IB_PORT + i
IB_SERVER_WAIT_S = 0.5  # the client starts this long after its server was started


@dataclass(frozen=True)
class Rails:
    form: str  # "TCP" or "ib_write_bw"
    measured: list[bw.Rail]
    min_gbps: float
    key: str  # where the threshold comes from, for the failure
    schedule: Schedule

    def header(self, nodes: int) -> str:
        """What was measured, for the failure's first line."""
        if not self.schedule.sampled:
            return f"per-rail bandwidth by {self.form}, every ordered pair of {nodes} nodes"
        return (
            f"per-rail bandwidth by {self.form}, a sample past {plan_key('fabric.all_pairs_up_to')}"
            f": {self.schedule.rounds} of the {self.schedule.of_rounds} rounds of pairs "
            f"({plan_key('fabric.pair_sample_rounds')}, {plan_key('fabric.pair_sample_seed')}), "
            f"{self.schedule.streams} streams"
        )


class NoRails(Exception):
    """Nothing to measure, or nothing to judge it by; the message says which plan fact."""


def measure_rails(
    remotes: dict[str, Remote], inventory: Inventory, probes: PerNode[Sections]
) -> Rails:
    """Every scheduled rail measured, step by step; NoRails where nothing would judge the
    TCP form."""
    nodes, fabric = inventory.nodes, inventory.fabric
    if len(nodes) < 2:
        raise NoRails("the plan has one node: no rail between nodes")
    plan = schedule(
        [n.name for n in nodes],
        fabric.all_pairs_up_to,
        fabric.pair_sample_rounds,
        fabric.pair_sample_seed,
    )
    named = {n.name: n for n in nodes}
    steps = [[(named[s], named[r]) for s, r in step] for step in plan.steps]
    key = plan_key("fabric.min_gbps")
    perftest = all(fact(n, probes.of(n), perftest_of) for n in nodes)
    if perftest and all(n.fabric.hcas for n in nodes):
        measured = [rail for pairs in steps for rail in _ib_rails(remotes, pairs)]
        return Rails("ib_write_bw", measured, _ib_min(inventory), key, plan)
    if fabric.min_gbps is None:
        raise NoRails(
            "perftest (ib_write_bw) is not on every node planning HCAs, and fabric.min_gbps is "
            "unset: no threshold for the TCP form"
        )
    measured = [rail for pairs in steps for rail in _tcp_rails(remotes, pairs)]
    return Rails("TCP", measured, fabric.min_gbps, key, plan)


def _ib_min(inventory: Inventory) -> float:
    return inventory.fabric.min_gbps or bw.IB_DEFAULT_MIN_GBPS


def _tcp_rails(remotes: dict[str, Remote], pairs: list[tuple[Node, Node]]) -> list[bw.Rail]:
    """A receiver on each receiving node's fabric address, all at once, then every sender at
    once; the receivers a sender never reached are stopped (the others end by themselves)."""
    receivers = {r.name: r for _, r in pairs}

    def listen(remote: Remote) -> bw.Receiver:
        address = str(receivers[remote.node.name].fabric.address.ip)
        return bw.parse_receiver(remote.read(bw.receive_command(address), "the receiver").stdout)

    started = on_every_node({name: remotes[name] for name in receivers}, listen)
    answered: set[str] = set()  # a receiver that answered its sender ends by itself
    try:
        listening = every_value(started)
        senders = {s.name: remotes[s.name] for s, _ in pairs}
        done = on_every_node(senders, partial(_send, pairs=pairs, listening=listening))
        rails = list(every_value(done).values())
        answered = {rail.receiver for rail in rails if rail.gbps is not None}
    finally:
        left = {
            name: outcome.pid
            for name, outcome in started.items()
            if isinstance(outcome, bw.Receiver) and outcome.pid and name not in answered
        }
        _stop(remotes, left, bw.MARKER)
    return rails


def _stop(remotes: dict[str, Remote], pids: dict[str, int], marker: str) -> None:
    """Kill each node's PID, all at once, if it is still the process MARKER names."""
    on_every_node(
        {name: remotes[name] for name in pids},
        lambda r: r.run(stop_listener_command(pids[r.node.name], marker)),
    )


def _send(
    remote: Remote, *, pairs: list[tuple[Node, Node]], listening: dict[str, bw.Receiver]
) -> bw.Rail:
    sender, receiver = next((s, r) for s, r in pairs if s.name == remote.node.name)
    to, got = str(receiver.fabric.address.ip), listening[receiver.name]
    path = f"{sender.fabric.address.ip} -> {to} (TCP)"
    if got.port is None:
        return bw.Rail(sender.name, receiver.name, path, None, f"no receiver: {got.error}")
    out = remote.read(bw.send_command(to, got.port), f"the TCP stream to {to}").stdout
    return bw.Rail(sender.name, receiver.name, path, *bw.parse_tcp_answer(out))


def _ib_rails(remotes: dict[str, Remote], pairs: list[tuple[Node, Node]]) -> list[bw.Rail]:
    """For the i-th HCA of every pair's nodes in turn: a server on each receiver, all at
    once, then each client; then each server still there (its client failed) is stopped."""
    rails: list[Outcome[bw.Rail]] = []
    senders = {s.name: remotes[s.name] for s, _ in pairs}
    for i in range(min(len(n.fabric.hcas) for s, r in pairs for n in (s, r))):
        servers = on_every_node(
            {r.name: remotes[r.name] for _, r in pairs}, partial(_ib_server, pairs=pairs, i=i)
        )
        try:
            rails += on_every_node(senders, partial(_ib_client, pairs=pairs, i=i)).values()
        finally:
            _stop(
                remotes,
                {n: pid for n, pid in servers.items() if isinstance(pid, int)},
                "ib_write_bw",
            )
    return [value(rail) for rail in rails]


def _ib_server(remote: Remote, *, pairs: list[tuple[Node, Node]], i: int) -> int | None:
    receiver = next(r for _, r in pairs if r.name == remote.node.name)
    started = remote.run(bw.ib_write_bw_detached(receiver.fabric.hcas[i], IB_PORT + i))
    pid = started.stdout.strip()
    return int(pid) if pid.isdigit() else None


def _ib_client(remote: Remote, *, pairs: list[tuple[Node, Node]], i: int) -> bw.Rail:
    sender, receiver = next((s, r) for s, r in pairs if s.name == remote.node.name)
    ours, theirs = sender.fabric.hcas[i], receiver.fabric.hcas[i]
    client = bw.ib_write_bw_client(ours, IB_PORT + i, str(receiver.fabric.address.ip))
    out = remote.read(f"sleep {IB_SERVER_WAIT_S}; {client} 2>&1", f"ib_write_bw from {ours}")
    path = f"{ours} -> {receiver.name}'s {theirs} (ib_write_bw)"
    return bw.Rail(sender.name, receiver.name, path, *bw.parse_ib_write_bw(out.stdout))
