"""Making the lab: every step checks what exists first, so `up` converges and a second `up`
changes nothing. Network and namespaces are made node by node (a few ms each); the services
of all nodes are started together and waited for under one deadline."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from infergate_lab import docker, namespaces, net, services, sshd
from infergate_lab import layout as L
from infergate_lab.cgroups import Cgroups
from infergate_lab.inventory import render_inventory
from infergate_lab.layout import NodeSpec
from infergate_lab.state import LabState, NodeRecord

Say = Callable[[str], None]


def ensure_node(spec: NodeSpec, state: LabState, cgroups: Cgroups) -> None:
    """Everything of one node except its running services."""
    rec = state.node(spec.name)
    if rec.netns and not net.netns_exists(rec.netns):
        raise RebuildNode(rec)  # its namespaces outlived their network: start over
    namespaces.ensure_node_dirs(spec, rec, state)
    net.ensure_node(spec, rec, state)
    namespaces.ensure_node_ns(spec, rec, state)
    made = cgroups.create(spec, int(state.node_mem_gib * 2**30))
    rec.cgroups += [str(d) for d in made]
    state.save()
    sshd.ensure_node_files(spec)
    if state.docker:
        docker.ensure_node_files(spec)


class RebuildNode(Exception):
    """A recorded node whose namespaces outlived their network: rebuild it from nothing."""

    def __init__(self, rec: NodeRecord) -> None:
        super().__init__(rec.name)
        self.rec = rec


def start_services(state: LabState, cgroups: Cgroups, specs: list[NodeSpec], say: Say) -> None:
    """Every node runs what the lab's mode asks, no more: a lab switched to sshd only stops
    the dockerd its nodes ran (their data roots stay, so switching back finds the images)."""
    if not state.docker:
        for spec in specs:
            if services.running(state, spec, "dockerd"):
                services.stop_service(state, spec, "dockerd")
                say(f"{spec.name}: stopped dockerd (the lab runs sshd only)")
            state.node(spec.name).procs.pop("dockerd", None)
        state.save()
    started = services.start(state, cgroups, specs, services.node_services(state.docker))
    services.wait_ready(state, started)
    for spec, name in started:
        say(f"{spec.name}: started {name} (pid {state.node(spec.name).procs[name].pid})")


def write_client_files(specs: list[NodeSpec]) -> None:
    """known_hosts for the nodes that exist now, and the inventory that names them."""
    sshd.write_known_hosts(specs)
    L.INVENTORY_FILE.write_text(render_inventory(len(specs)))


def describe_changes(before: dict[str, object], rec: NodeRecord) -> str | None:
    """What `up` made for a node, from its record before and after; None: nothing."""
    after = asdict(rec)
    made = []
    for key in ("netns", "links", "mounts", "cgroups", "dirs"):
        if after[key] != before.get(key):
            made.append(key)
    return f"{rec.name}: made {', '.join(made)}" if made else None
