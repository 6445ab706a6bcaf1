"""Removing what `up` recorded, and only that: processes (by pid and start time, whole trees),
then anything still in the nodes' cgroups, namespace handles, links, namespaces, cgroups,
directories. Every step tolerates its object being gone already, so `down` runs twice."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from infergate.waiting import Deadline, WaitTimedOut, retrying, wait_until
from infergate_lab import layout as L
from infergate_lab import net
from infergate_lab.cgroups import Cgroups, remove_tree
from infergate_lab.namespaces import release_handles
from infergate_lab.procs import Proc, start_time, stop, tree
from infergate_lab.shell import LabError, mount_points, mounted, run, unmount
from infergate_lab.state import LabState, NodeRecord

Say = Callable[[str], None]

# Each of the two rounds of a teardown's stop: we end everything anyway, so no round waits
# for a container that ignores SIGTERM as docker would (10 s)
TEARDOWN_STOP = Deadline(3.0, "infergate_lab.teardown.TEARDOWN_STOP")
# A data root still a mount point in a mount namespace the kernel is tearing down: EBUSY
# clears in well under a second
RMTREE_DEADLINE = Deadline(10.0, "infergate_lab.teardown.RMTREE_DEADLINE")


def stop_processes(records: Iterable[NodeRecord], cgroups: Cgroups, extra: list[Proc]) -> int:
    """End the recorded processes of these nodes, all nodes at once (16 cost one deadline).

    The recorded roots first, alone: dockerd then stops its containers and its containerd
    in order, unless a container ignores SIGTERM (docker would wait 10 s for it: we do not,
    everything goes anyway). Then what is left of their trees and whatever else the nodes'
    cgroups hold (shims, containers, SSH sessions)."""
    records = list(records)
    roots = [*(p for r in records for p in r.procs.values()), *extra]
    trees = [p for root in roots for p in tree(root)]
    stop(roots, TEARDOWN_STOP)
    rest = {p for p in trees if p.alive()} | set(_in_cgroups(records, cgroups))
    stop(rest, TEARDOWN_STOP)
    if still := _in_cgroups(records, cgroups):
        raise LabError(f"processes {sorted(p.pid for p in still)} survive in the lab cgroups")
    return len({*trees, *rest})


def _in_cgroups(records: list[NodeRecord], cgroups: Cgroups) -> list[Proc]:
    found = []
    for rec in records:
        for pid in cgroups.pids(L.spec_named(rec.name)):
            start = start_time(pid)
            if start is not None and Proc(pid, start).alive():
                found.append(Proc(pid, start))
    return found


def remove_node(rec: NodeRecord) -> None:
    """What is left of a node once its processes are gone."""
    release_handles(rec.mounts)
    for link in reversed(rec.links):
        net.delete_link(link)
    if rec.netns:
        net.delete_netns(rec.netns)
    for cg in reversed(rec.cgroups):
        remove_tree(Path(cg))
    for d in reversed(rec.dirs):
        _rmtree(Path(d))


def _rmtree(path: Path) -> None:
    """Remove a lab directory, retrying EBUSY briefly (RMTREE_DEADLINE)."""

    def remove() -> None:
        if path.exists():
            shutil.rmtree(path)

    try:
        wait_until(retrying(remove), f"{path} removed", RMTREE_DEADLINE, every_s=0.2)
    except WaitTimedOut as e:
        raise LabError(str(e)) from None


def remove_shared(state: LabState) -> None:
    """The lab-wide pieces, after every node is gone."""
    net.restore_sysctls(state)
    for link in reversed(state.links):
        net.delete_link(link)
    for ns in reversed(state.netns):
        net.delete_netns(ns)
    for m in reversed(state.mounts):
        unmount(m)
    for cg in reversed(state.cgroups):
        remove_tree(Path(cg))
    for f in (L.STATE_FILE, L.INVENTORY_FILE):
        if str(L.LAB_DIR) not in state.dirs:
            f.unlink(missing_ok=True)
    for d in reversed(state.dirs):
        _rmtree(Path(d))
    for d in reversed(state.shared_dirs):
        _remove_if_empty(Path(d))


def _remove_if_empty(top: Path) -> None:
    """rmdir a host directory the lab made (/run/sshd, /run/netns, ...) if nothing but empty
    directories is left in it; something else may have started using it meanwhile."""
    if not top.is_dir():
        return
    if top == L.NETNS_DIR and mounted(top) and not any(top.iterdir()):
        run(["umount", str(top)])  # `ip netns add` made it a mount point
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        _rmdir_quietly(d)
    _rmdir_quietly(top)


def _rmdir_quietly(d: Path) -> None:
    with contextlib.suppress(OSError):  # not empty, or in use: not ours alone any more
        d.rmdir()


def leftovers(cgroups: Cgroups) -> list[str]:
    """Whatever of a lab is on this machine, recorded or not: empty after a clean `down`."""
    found = [f"netns {p.name}" for p in _glob(L.NETNS_DIR, "iglab-*")]
    found += [f"link {p.name}" for p in _glob(Path("/sys/class/net"), "iglab-*")]
    lab_paths = (str(L.RUN_DIR), str(L.LAB_DIR), str(L.MODELS_MOUNTPOINT), "/run/netns/iglab-")
    found += [f"mount {m}" for m in mount_points() if m.startswith(lab_paths)]
    roots = (h / L.CGROUP_ROOT for h in cgroups.hierarchies)
    found += [f"cgroup {d}" for d in roots if d.exists()]
    found += [f"dir {d}" for d in (L.LAB_DIR, L.RUN_DIR) if d.exists()]
    return found + [f"process {pid}" for pid in _lab_processes()]


def _glob(d: Path, pattern: str) -> list[Path]:
    return sorted(d.glob(pattern)) if d.is_dir() else []


def _lab_processes() -> list[int]:
    """Living processes whose cgroup (any hierarchy) is under the lab's."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            in_lab = f"/{L.CGROUP_ROOT}/" in (entry / "cgroup").read_text()
        except OSError:
            continue  # not a process, or gone
        start = start_time(int(entry.name)) if in_lab else None
        if start is not None and Proc(int(entry.name), start).alive():  # zombies do not count
            pids.append(int(entry.name))
    return pids
