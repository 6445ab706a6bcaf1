"""A node's long-lived services, sshd and (unless the lab runs sshd only) dockerd: started in
the node's namespaces and cgroup, many nodes at once, and waited for together under one
deadline."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from infergate.waiting import Deadline, WaitTimedOut, wait_until
from infergate_lab import docker, sshd
from infergate_lab.cgroups import Cgroups
from infergate_lab.layout import NodeSpec
from infergate_lab.namespaces import nsenter
from infergate_lab.procs import Proc, stop_tree
from infergate_lab.shell import LabError, launch
from infergate_lab.state import LabState

# 16 nodes' sshd + dockerd are ready ~2.5 s after launch on this 2-core VM; a slow disk or
# the vfs storage driver takes longer, a broken config never: it exits, and that is seen.
READY_DEADLINE = Deadline(90.0, "infergate_lab.services.READY_DEADLINE")
# A service stopped as a fault: dockerd may first stop the node's containers
SERVICE_STOP_DEADLINE = Deadline(15.0, "infergate_lab.services.SERVICE_STOP_DEADLINE")


@dataclass(frozen=True)
class Service:
    name: str
    argv: Callable[[NodeSpec], list[str]]
    ready: Callable[[NodeSpec], bool]
    what: str  # how a timeout describes the missing readiness


SERVICES = {
    "sshd": Service("sshd", sshd.argv, sshd.port_open, "port 22 open"),
    "dockerd": Service("dockerd", docker.argv, docker.answers, "API answering /_ping"),
}


def node_services(docker: bool) -> tuple[str, ...]:
    """What every node runs: sshd, and dockerd in a lab with Docker."""
    return ("sshd", "dockerd") if docker else ("sshd",)


def running(state: LabState, spec: NodeSpec, name: str) -> Proc | None:
    proc = state.node(spec.name).procs.get(name)
    return proc if proc and proc.alive() else None


def start(
    state: LabState,
    cgroups: Cgroups,
    specs: Iterable[NodeSpec],
    names: Iterable[str],
    extra: Sequence[str] = (),
) -> list[tuple[NodeSpec, str]]:
    """Launch each named service on each node unless it runs, EXTRA appended to its
    command line (a fault's own flags); return what was launched."""
    started = []
    for spec in specs:
        for name in names:
            if running(state, spec, name):
                continue
            service = SERVICES[name]
            argv = [*nsenter(spec), *service.argv(spec), *extra]
            pid = launch(argv, cgroups.procs_file(spec), spec.log(name))
            state.node(spec.name).procs[name] = Proc.of(pid)
            state.save()
            started.append((spec, name))
    return started


def wait_ready(
    state: LabState, pending: list[tuple[NodeSpec, str]], deadline: Deadline = READY_DEADLINE
) -> None:
    """Wait until every launched service answers; fail at once when one dies, and at the
    deadline name each node still not ready with its log."""
    left = list(pending)

    def ready() -> tuple[bool | None, str]:
        for spec, name in left:
            if not running(state, spec, name):
                raise LabError(_not_ready(spec, name, "exited"))
        left[:] = [(s, n) for s, n in left if not SERVICES[n].ready(s)]
        return (None if left else True), " ".join(f"{s.name}:{n}" for s, n in left)

    try:
        wait_until(ready, "every lab service ready", deadline, every_s=0.1)
    except WaitTimedOut as e:
        late = f"not ready after {e.deadline}"
        raise LabError("; ".join(_not_ready(s, n, late) for s, n in left)) from None


def _not_ready(spec: NodeSpec, name: str, how: str) -> str:
    log = spec.log(name)
    tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
    last = " | ".join(tail)
    return f"{spec.name}: {name} {how} (wanted: {SERVICES[name].what}); log {log}: {last}"


def stop_service(state: LabState, spec: NodeSpec, name: str) -> None:
    """Stop one service with everything it runs, as a crash or `systemctl kill` would: for
    sshd that ends open sessions too, so a multiplexed SSH master cannot outlive the fault."""
    proc = running(state, spec, name)
    if proc:
        stop_tree(proc, SERVICE_STOP_DEADLINE)
