"""The lab's handle: up, down, status, faults, and running things inside a node.

Every public method reads the state file afresh, so the CLI and a pytest session can work
on the same lab one after the other. Needs root.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict

import docker as docker_py

from infergate_lab import build, docker, faults, namespaces, net, pyspy, sshd, teardown
from infergate_lab import layout as L
from infergate_lab.cgroups import Cgroups
from infergate_lab.layout import NodeSpec
from infergate_lab.procs import Proc
from infergate_lab.shell import Done, LabError, ensure_packages, run
from infergate_lab.state import FaultRecord, LabState, NodeRecord, load
from infergate_lab.status import NodeStatus, node_status

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def mode_words(docker: bool) -> str:
    return "sshd and dockerd on every node" if docker else "sshd only (no dockerd, no image)"


class Lab:
    """The lab on this machine (root needed to change it).

    up(n) / down() / status(); apply_fault(kind, node, *args) / clear_faults() with the kinds
    of faults.KINDS; node_exec(node, argv) runs argv inside a node (its namespaces and cgroup,
    DOCKER_HOST set); ssh(node, argv) as the suite reaches it; engine(node) is the node's
    Docker Engine API on its local socket; make_image(node) imports the tiny busybox image;
    memory_usage(node) reads the node's cgroup; leftovers() lists lab things left on the
    machine. Errors are LabError, naming the node and where to look.
    """

    def __init__(self, say: Say = _quiet) -> None:
        self.say = say
        self.cgroups = Cgroups.detect()
        self._state: LabState | None = None

    @property
    def state(self) -> LabState:
        """The state of the operation under way (read at its start)."""
        if self._state is None:
            raise LabError("no lab on this machine: run `python -m infergate_lab up`")
        return self._state

    def _load(self) -> LabState:
        self._state = load()
        return self.state

    def up(
        self,
        n: int = L.DEFAULT_NODES,
        node_mem_gib: float = L.DEFAULT_NODE_MEM_GIB,
        docker: bool = True,
    ) -> None:
        """Make (or complete, or resize to) a lab of n nodes, each with sshd and dockerd, or
        sshd alone (DOCKER false); changes nothing if it is so."""
        specs = L.node_specs(n, docker)
        installed = ensure_packages()
        if installed:
            self.say(f"installed {' '.join(installed)}")
        state = self._state = load() or LabState(node_mem_gib)
        state.installed += installed
        state.node_mem_gib = node_mem_gib
        if state.docker != docker:
            self.say(f"lab mode: {mode_words(state.docker)} -> {mode_words(docker)}")
        state.docker = docker
        namespaces.ensure_dirs(state)
        state.cgroups += [str(d) for d in self.cgroups.create_root()]
        if state.faults:
            self.say(f"cleared faults: {', '.join(f.kind for f in self._clear(state))}")
        gone = [r for name, r in state.nodes.items() if L.spec_named(name).index > n]
        self._remove(state, gone)
        sshd.ensure_client_key()
        net.ensure_shared(state)
        net.ensure_kernel_room(state, n)
        for spec in specs:
            self._ensure_node(state, spec)
        pyspy.ensure_py_spy(specs, self.say)  # for the deploy's hang forensics
        build.start_services(state, self.cgroups, specs, self.say)
        build.write_client_files(specs)
        self.say(f"lab up: {n} node(s), {mode_words(docker)}, inventory {L.INVENTORY_FILE}")

    def _ensure_node(self, state: LabState, spec: NodeSpec) -> None:
        before = asdict(state.node(spec.name))
        try:
            build.ensure_node(spec, state, self.cgroups)
        except build.RebuildNode as stale:
            self.say(f"{spec.name}: its network namespace is gone: rebuilding the node")
            self._remove(state, [stale.rec])
            build.ensure_node(spec, state, self.cgroups)
        if change := build.describe_changes(before, state.node(spec.name)):
            self.say(change)

    def _remove(self, state: LabState, records: list[NodeRecord]) -> None:
        """Take nodes out of the lab entirely (they have no faults: cleared before)."""
        if not records:
            return
        teardown.stop_processes(records, self.cgroups, [])
        for rec in records:
            teardown.remove_node(rec)
            del state.nodes[rec.name]
            state.save()
            self.say(f"{rec.name}: removed")
        remaining = [L.spec_named(name) for name in state.nodes]
        for rec in records:
            net.forget(L.spec_named(rec.name), remaining)

    def down(self) -> None:
        """Remove everything `up` made, as recorded; a no-op when nothing is recorded."""
        state = self._state = load()
        if state is None:
            self.say("no lab recorded: nothing to remove")
            return
        fault_procs = [
            Proc(f.undo["pid"], f.undo["start"]) for f in state.faults if "pid" in f.undo
        ]
        count = teardown.stop_processes(state.nodes.values(), self.cgroups, fault_procs)
        state.faults.clear()
        for rec in reversed(list(state.nodes.values())):
            teardown.remove_node(rec)
        self.say(f"stopped {count} process(es); removed {', '.join(state.nodes) or 'no nodes'}")
        state.nodes.clear()
        state.save()
        teardown.remove_shared(state)
        self.say("lab down")

    def runs_docker(self) -> bool | None:
        """Whether the lab's nodes run dockerd (False: sshd only); None: no lab."""
        state = load()
        return None if state is None else state.docker

    def status(self) -> list[NodeStatus]:
        state = load()
        if state is None:
            return []
        names = sorted(state.nodes, key=lambda n: L.spec_named(n).index)
        return [node_status(state, L.spec_named(n)) for n in names]

    def leftovers(self) -> list[str]:
        """Whatever of a lab is on this machine (netns, links, mounts, cgroups, dirs,
        processes), recorded or not; empty after a clean `down`."""
        return teardown.leftovers(self.cgroups)

    def spec(self, node: str) -> NodeSpec:
        """A node of the lab as it is now; an error naming the nodes there are otherwise."""
        state = self._load()
        if node not in state.nodes:
            raise LabError(f"the lab has no {node}; it has {', '.join(state.nodes) or 'none'}")
        return L.spec_named(node)

    def apply_fault(self, kind: str, node: str, *args: str) -> FaultRecord:
        """Inject a fault for real (see faults.KINDS); recorded until clear_faults()."""
        spec, fault = self.spec(node), faults.kind(kind, list(args))
        if fault.needs_docker and not self.state.docker:
            raise LabError(f"{kind} needs Docker; the lab runs sshd only (`up` without it)")
        record = FaultRecord(kind, node, list(args), fault.apply(self, spec, list(args)))
        self.state.faults.append(record)
        self.state.save()
        return record

    def clear_faults(self) -> list[FaultRecord]:
        """Undo every injected fault, latest first; returns what was cleared."""
        self._state = load()
        return self._clear(self._state) if self._state else []

    def _clear(self, state: LabState) -> list[FaultRecord]:
        cleared = []
        while state.faults:
            record = state.faults[-1]
            kind = faults.KINDS[record.kind]
            kind.clear(self, L.spec_named(record.node), record.undo)
            cleared.append(state.faults.pop())
            state.save()
        return cleared

    def nsenter(self, spec: NodeSpec) -> list[str]:
        return namespaces.nsenter(spec)

    def node_exec(
        self, node: str, argv: Sequence[str], timeout: float = 60, check: bool = True
    ) -> Done:
        """Run argv inside the node (its namespaces and cgroup, DOCKER_HOST its engine)."""
        spec = self.spec(node)
        wrapped = namespaces.in_node(spec, self.cgroups.procs_file(spec), argv)
        return run(wrapped, timeout=timeout, check=check, env={"DOCKER_HOST": spec.docker_host})

    def ssh(self, node: str, command: Sequence[str], timeout: float = 30) -> Done:
        """Run a command on the node over SSH, as the suite reaches it (never raises on exit
        status: the caller judges it)."""
        return run(sshd.ssh_argv(self.spec(node), command), timeout=timeout, check=False)

    def engine(self, node: str, timeout_s: float = 60) -> docker_py.DockerClient:
        """The node's Docker engine through its API on the node's own socket, the client the
        suite uses over SSH; TIMEOUT_S bounds each call's wait. Close it after use."""
        return docker.engine(self.spec(node), timeout_s)

    def make_image(self, node: str, ref: str = docker.LAB_IMAGE) -> str:
        """Import the tiny busybox image into the node's engine; returns its image ID."""
        return docker.make_image(self.spec(node), ref)

    def memory_usage(self, node: str) -> int:
        """Bytes charged to the node's memory cgroup now."""
        return self.cgroups.usage(self.spec(node))
