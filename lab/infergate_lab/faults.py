"""Faults injected for real into a node, each undone by `clear`: a registry of named kinds.

A kind is two functions: `apply(lab, node, args)` makes the fault and returns what `clear`
needs to undo it (recorded in the state file); `clear(lab, node, undo)` restores the node.
To add a kind, write both and register them below. A fault's process, if it has one, is
recorded as undo["pid"]/["start"] so that `down` can end it without knowing the kind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from infergate.waiting import Deadline, WaitTimedOut, wait_until
from infergate_lab import (
    docker,
    faults_disk,
    faults_inimage,
    faults_plan,
    faults_ports,
    faults_rdma,
    net,
    services,
)
from infergate_lab.fault_kind import FaultKind, Undo, end_process
from infergate_lab.layout import NodeSpec
from infergate_lab.namespaces import nsenter
from infergate_lab.procs import Proc, stop
from infergate_lab.shell import LabError, launch, run

if TYPE_CHECKING:
    from infergate_lab.lab import Lab


def _link_down(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    net.set_fabric(spec, up=False)
    return {}


def _link_up(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    net.set_fabric(spec, up=True)


def _mtu(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    old = net.fabric_mtu(spec)
    net.set_fabric(spec, mtu=int(args[0]))
    return {"mtu": old}


def _mtu_back(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    net.set_fabric(spec, mtu=int(undo["mtu"]))


# Touches every page (bytes * n is a memset), so the memory is resident and charged to the
# node's cgroup, then sleeps until killed.
_HOG = "import signal, sys; held = b'\\1' * int(sys.argv[1]); signal.pause()"


# Touching gigabytes of pages, or dd filling a tmpfs, runs at memory speed: a second or two;
# one that is still short after a minute is held back by the node's limit (reclaim, swap)
FILL_DEADLINE = Deadline(60.0, "infergate_lab.faults.FILL_DEADLINE")


def _hold_memory(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    size = int(float(args[0]) * 2**30)
    argv = [*lab.nsenter(spec), "/usr/bin/python3", "-c", _HOG, str(size)]
    proc = Proc.of(launch(argv, lab.cgroups.procs_file(spec), spec.log("hold-memory")))
    _wait_resident(lab, spec, proc, size)
    return {"pid": proc.pid, "start": proc.start}


def _wait_resident(lab: Lab, spec: NodeSpec, proc: Proc, size: int) -> None:
    """Until the hog has touched all its memory; if the node's limit kills it, say so."""

    def resident() -> tuple[bool | None, str]:
        if not proc.alive():
            raise LabError("was killed")
        rss = _rss(proc)
        return (True if rss >= size * 0.98 else None), f"{rss / 2**30:.2f} GiB resident"

    try:
        wait_until(resident, "all of it resident", FILL_DEADLINE, every_s=0.05)
    except (LabError, WaitTimedOut) as e:
        stop([proc])
        raise LabError(
            f"{spec.name}: the process holding {size / 2**30:g} GiB: {e} (the node's "
            f"memory limit is {lab.cgroups.limit(spec) / 2**30:g} GiB); see dmesg"
        ) from None


def _rss(proc: Proc) -> int:
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text()
    except OSError:
        return 0
    line = next((ln for ln in status.splitlines() if ln.startswith("VmRSS:")), "VmRSS: 0 kB")
    return int(line.split()[1]) * 1024


def _stopper(name: str) -> Callable[[Lab, NodeSpec, list[str]], Undo]:
    def apply(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
        services.stop_service(lab.state, spec, name)
        return {}

    return apply


def _starter(name: str) -> Callable[[Lab, NodeSpec, Undo], None]:
    def clear(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
        state = lab.state
        services.wait_ready(state, services.start(state, lab.cgroups, [spec], [name]))

    return clear


def _hide_tool(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """/dev/null bound over the node's TOOL: still a file there, but not a command."""
    found = run([*nsenter(spec), "sh", "-c", 'command -v "$1"', "sh", args[0]], check=False)
    path = found.stdout.strip()
    if found.returncode != 0 or not path.startswith("/"):
        raise LabError(f"{spec.name} has no command {args[0]!r} to hide")
    run([*nsenter(spec), "mount", "--bind", "/dev/null", path], timeout=15)
    return {"path": path}


def _show_tool(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    run([*nsenter(spec), "umount", undo["path"]], timeout=15)


def _foreign_container(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """A leftover container holding memory, as the embeddings one did on the real node 2."""
    mib = int(float(args[0]) * 1024)
    if not docker.image_present(spec):
        docker.make_image(spec)
    cid = docker.docker(
        spec,
        "run",
        "-d",
        "--name",
        "leftover-embeddings",
        "--network",
        "host",
        "--tmpfs",
        f"/hold:size={mib + 16}m",
        "--label",
        "infergate-lab.fault=foreign-container",
        docker.LAB_IMAGE,
        "sh",
        "-c",
        # sleeps in the background so that `docker stop` (SIGTERM to pid 1) is obeyed at once
        f"dd if=/dev/zero of=/hold/fill bs=1M count={mib} 2>/dev/null; "
        "trap 'exit 0' TERM; sleep 2147483647 & wait",
    ).strip()
    undo = {"container": cid}

    def filled() -> tuple[bool | None, str]:
        used = lab.cgroups.usage(spec, child=cid)
        return (True if used >= mib * 2**20 else None), f"{used / 2**30:.2f} GiB charged"

    try:
        wait_until(filled, f"container {cid[:12]} filling {args[0]} GiB", FILL_DEADLINE, 0.1)
    except WaitTimedOut as e:
        _remove_container(lab, spec, undo)
        raise LabError(f"{spec.name}: {e}") from None
    return undo


def _remove_container(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    docker.docker(spec, "rm", "-f", undo["container"])


KINDS: dict[str, FaultKind] = {
    k.name: k
    for k in (
        FaultKind("link-down", (), "fab0 down in the node", _link_down, _link_up),
        FaultKind("mtu", ("BYTES",), "fab0 MTU set to BYTES", _mtu, _mtu_back),
        FaultKind(
            "hold-memory",
            ("GIB",),
            "a process in the node holds GIB of memory",
            _hold_memory,
            end_process,
        ),
        FaultKind("sshd-stop", (), "the node's sshd stopped", _stopper("sshd"), _starter("sshd")),
        FaultKind(
            "docker-stop",
            (),
            "the node's dockerd stopped",
            _stopper("dockerd"),
            _starter("dockerd"),
            needs_docker=True,
        ),
        FaultKind("tool-missing", ("TOOL",), "TOOL is no command there", _hide_tool, _show_tool),
        FaultKind(
            "foreign-container",
            ("GIB",),
            "a container on the node holds GIB",
            _foreign_container,
            _remove_container,
            needs_docker=True,
        ),
        *faults_plan.KINDS,
        *faults_disk.KINDS,
        *faults_inimage.KINDS,
        *faults_ports.KINDS,
        *faults_rdma.KINDS,
    )
}


def kind(name: str, args: list[str]) -> FaultKind:
    """The named kind, its arguments checked; errors list what exists."""
    found = KINDS.get(name)
    if found is None:
        raise LabError(f"no fault kind {name!r}; known: {', '.join(KINDS)}")
    if len(args) != len(found.args):
        raise LabError(f"fault {name} takes NODE {' '.join(found.args)}, got {args}")
    return found
