"""What each node is doing now, read from the machine (the state file only says what to
look at): namespace present, sshd alive and port 22 open, dockerd alive and answering where
the lab runs Docker."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from infergate_lab import docker, net, sshd
from infergate_lab.layout import NodeSpec
from infergate_lab.services import running
from infergate_lab.state import LabState


@dataclass(frozen=True)
class NodeStatus:
    name: str
    address: str
    netns: bool
    sshd: bool  # the recorded sshd process is alive
    port22: bool
    docker: bool  # the lab runs dockerd on its nodes (False: sshd only)
    dockerd: bool
    docker_answers: bool
    faults: tuple[str, ...]  # "mtu 1400", ...
    pids: Mapping[str, int]  # of the services alive: "sshd", "dockerd"

    @property
    def healthy(self) -> bool:
        """Everything up and no fault injected."""
        engine = (self.dockerd, self.docker_answers) if self.docker else ()
        return all((self.netns, self.sshd, self.port22, *engine)) and not self.faults


def node_status(state: LabState, spec: NodeSpec) -> NodeStatus:
    faults = tuple(" ".join([f.kind, *f.args]) for f in state.faults if f.node == spec.name)
    return NodeStatus(
        name=spec.name,
        address=spec.mgmt_ip,
        netns=net.netns_exists(spec.netns),
        sshd=running(state, spec, "sshd") is not None,
        port22=sshd.port_open(spec),
        docker=state.docker,
        dockerd=running(state, spec, "dockerd") is not None,
        docker_answers=state.docker and docker.answers(spec),
        faults=faults,
        pids={k: p.pid for k, p in state.node(spec.name).procs.items() if p.alive()},
    )


def table(statuses: list[NodeStatus]) -> str:
    """One row per node; a service column shows its pid, or DOWN; dockerd's columns show `-`
    in a lab of sshd only."""

    def ok(flag: bool) -> str:
        return "ok" if flag else "DOWN"

    def pid(s: NodeStatus, name: str) -> str:
        return str(s.pids[name]) if name in s.pids else "DOWN"

    rows = [("node", "address", "netns", "sshd", ":22", "dockerd", "api", "faults")]
    for s in statuses:
        engine = (pid(s, "dockerd"), ok(s.docker_answers)) if s.docker else ("-", "-")
        services = (pid(s, "sshd"), ok(s.port22), *engine)
        rows.append((s.name, s.address, ok(s.netns), *services, ", ".join(s.faults) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(line.rstrip() for line in lines)
