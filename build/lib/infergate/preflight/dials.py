"""TCP across the fabric, dialled for real: a listener on the head's dist-init port dialled
from every other node, and a sample of the ports the ranks open after the rendezvous,
listened on by every node and dialled by every peer, all at once. Every listener ends by
itself (LISTENER_TTL_S, or once every peer dialled it) and is stopped where one did not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infergate.checks import facts as read
from infergate.checks.firewall import Dial, sample_ports
from infergate.checks.ports import (
    Listener,
    dial_command,
    listen_command,
    parse_dials,
    parse_listener,
    stop_listener_command,
)
from infergate.engines.registry import engine_for
from infergate.plan.model import Inventory, Node
from infergate.preflight.per_node import FactUnreadable, PerNode, fact, value
from infergate.remote.fanout import on_every_node
from infergate.remote.ssh import NodeUnreachable, Outcome, Remote

# A listener's own end, should its stop never come (the run killed): it outlasts every
# node's dial and frees the port well before a rendezvous needs it.
LISTENER_TTL_S = 30
# A SYN answered or refused comes back in milliseconds; 3 s also cover one retransmission.
DIAL_TIMEOUT_S = 3


def dial_dist_init(
    remotes: dict[str, Remote], inventory: Inventory
) -> tuple[Listener, dict[str, Outcome[str]]]:
    """A listener on the head's dist-init port, dialled from every other node over the
    fabric; killed once the dials are done, so the port is free for the rendezvous."""
    head, port = remotes[inventory.head.name], inventory.engine.dist_init_port
    others = {name: r for name, r in remotes.items() if name != inventory.head.name}
    listen = listen_command([port], LISTENER_TTL_S, dials=len(others))
    said = head.read(listen, f"the listener on dist-init port {port}").stdout
    listener = parse_listener(said)
    if listener.pid is None:
        return listener, {}
    address = str(inventory.engine.dist_init_addr)
    dial = dial_command([(address, port)], timeout_s=DIAL_TIMEOUT_S)
    what = f"the dial to {address}:{port}"

    def dial_head(remote: Remote) -> str:
        said = remote.read(dial, what).stdout
        return parse_dials(said).get((address, port), said)

    try:
        return listener, on_every_node(others, dial_head)
    finally:
        head.run(stop_listener_command(listener.pid))


@dataclass(frozen=True)
class Sampled:
    """One node's listener on a sample of the ports used after the rendezvous, and every
    peer's dial of each port it listens on."""

    listener: Listener
    dials: list[Dial]


def dial_after_rendezvous(
    remotes: dict[str, Remote], inventory: Inventory, probes: PerNode[read.Sections]
) -> dict[str, Sampled]:
    """Two parallel SSH round trips, and one DIAL_TIMEOUT_S where a port is cut: every node
    listens on a few ports of each range the ranks use after the rendezvous, every node
    dials every peer's; a listener whose peers did not all get through is stopped."""
    samples = {n.name: _sample(inventory, n, probes) for n in inventory.nodes}
    peers = len(inventory.nodes) - 1
    listen = {name: listen_command(list(s), LISTENER_TTL_S, peers) for name, s in samples.items()}
    started = on_every_node(
        remotes, lambda r: r.read(listen[r.node.name], "the listeners on sampled ports")
    )
    listeners = {name: parse_listener(value(outcome).stdout) for name, outcome in started.items()}
    cut = set(samples)  # until its dials are in: a listener whose peers all got through ended
    try:
        said = on_every_node(remotes, lambda r: _dial_peers(r, inventory, listeners))
        dials: dict[str, list[Dial]] = {n: [] for n in samples}
        for source, outcome in said.items():
            for (address, port), result in value(outcome).items():
                peer = next(n for n in inventory.nodes if str(n.fabric.address.ip) == address)
                dials[peer.name].append(Dial(source, port, samples[peer.name][port], result))
        cut = {n for n, ds in dials.items() if any(not d.result.startswith("ok") for d in ds)}
    finally:
        stop = {n: r for n, r in remotes.items() if n in cut}
        on_every_node(stop, lambda r: _stop(r, listeners[r.node.name]))
    return {name: Sampled(listeners[name], dials[name]) for name in samples}


def _sample(inventory: Inventory, node: Node, probes: PerNode[read.Sections]) -> dict[int, str]:
    sections = probes.of(node)
    span = fact(node, sections, read.port_range_of)
    held = {s.port for s in fact(node, sections, read.listening_of)}
    engine = engine_for(inventory)
    avoid = held | set(engine.planned_ports(inventory, node)) | {inventory.engine.dist_init_port}
    return sample_ports(span, engine.listen_spans, avoid)


def _dial_peers(
    remote: Remote, inventory: Inventory, listeners: dict[str, Listener]
) -> dict[tuple[str, int], str]:
    peers = inventory.peers(remote.node)
    targets = [(str(p.fabric.address.ip), port) for p in peers for port in listeners[p.name].ports]
    if not targets:
        return {}
    command = dial_command(targets, timeout_s=DIAL_TIMEOUT_S)
    text = remote.read(command, "the dials to the peers' sampled ports").stdout
    said = parse_dials(text)
    return {t: said.get(t, f"error no report: {text.strip()[:200]}") for t in targets}


def _stop(remote: Remote, listener: Listener) -> None:
    if listener.pid is not None:
        remote.run(stop_listener_command(listener.pid))


class Dials:
    """The run's dials, each made once, on first use; a failure (a node that could not
    answer) is kept and raised again to every later caller, as a session fixture's is."""

    def __init__(
        self, remotes: dict[str, Remote], inventory: Inventory, probes: PerNode[read.Sections]
    ) -> None:
        self.remotes, self.inventory, self.probes = remotes, inventory, probes
        self._made: dict[str, Any] = {}
        self._lock = threading.Lock()

    def dist_init(self) -> tuple[Listener, dict[str, Outcome[str]]]:
        found: tuple[Listener, dict[str, Outcome[str]]]
        found = self._once("dist-init", lambda: dial_dist_init(self.remotes, self.inventory))
        return found

    def after_rendezvous(self) -> dict[str, Sampled]:
        found: dict[str, Sampled] = self._once(
            "after", lambda: dial_after_rendezvous(self.remotes, self.inventory, self.probes)
        )
        return found

    def _once(self, name: str, make: Callable[[], Any]) -> Any:
        with self._lock:
            if name not in self._made:
                try:
                    self._made[name] = make()
                except (NodeUnreachable, FactUnreadable) as e:
                    self._made[name] = e
            made = self._made[name]
        if isinstance(made, Exception):
            raise made
        return made
