"""Each node's own mount, UTS and IPC namespaces, kept alive by bind mounts as `ip netns` does.

The node's mount namespace differs from the host's in three ways: /sys is a sysfs mounted
from inside the node's network namespace (so /sys/class/net shows mgmt0 and fab0), with the
host's cgroup mounts moved back on top of it (dockerd needs them, and `ip netns exec` loses
them by remounting /sys); /srv/models is the node's own model directory; and the handles of
other namespaces (/run/netns, the lab's ns dir) are unmounted, so no node pins another's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from infergate_lab import layout as L
from infergate_lab.layout import NodeSpec
from infergate_lab.shell import LabError, mounted, run, unmount
from infergate_lab.state import LabState, NodeRecord

# Runs inside the node's fresh namespaces: $1 hostname, $2 an empty scratch dir, $3 models,
# $4 root's home: a node has its own, not the controller's (whose shell start-up files,
# such as a pyenv init, would run on every SSH command and make the node unlike a server).
_NODE_SETUP = r"""set -e
hostname "$1"
mount --rbind /sys/fs/cgroup "$2"
umount -l /sys
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
mount --move "$2" /sys/fs/cgroup
mount --bind "$3" /srv/models
mount --bind "$4" /root
# its own /dev/shm, as a separate machine has: vLLM decides which ranks share a node by
# opening each other's shared memory, and a shared one makes two nodes look like one
mount -t tmpfs -o nosuid,nodev,mode=1777 shm /dev/shm
umount -l /run/netns 2>/dev/null || true  # absent when nothing made it a mount
umount -l /run/infergate-lab/ns
"""


def ensure_dirs(state: LabState) -> None:
    """The lab's own directories, the private ns dir, and two host paths the nodes need."""
    for d in (L.LAB_DIR, L.LAB_DIR / "nodes", L.SSH_DIR, L.RUN_DIR, L.RUN_DIR / "nodes"):
        if not d.exists():
            d.mkdir(parents=True)
            state.dirs.append(str(d))
    L.NS_DIR.mkdir(exist_ok=True)
    # unshare(1) refuses to bind a namespace handle onto a shared mount: make it private.
    if not mounted(L.NS_DIR):
        run(["mount", "--bind", str(L.NS_DIR), str(L.NS_DIR)])
        state.mounts.append(str(L.NS_DIR))
    run(["mount", "--make-private", str(L.NS_DIR)])
    for d in (L.MODELS_MOUNTPOINT, L.SSHD_PRIVSEP_DIR, *L.DOCKER_SHARED_RUN_DIRS):
        if not d.exists() and str(top := _first_missing(d)) not in state.shared_dirs:
            state.shared_dirs.append(str(top))
    L.MODELS_MOUNTPOINT.mkdir(parents=True, exist_ok=True)
    L.SSHD_PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    state.save()


def _first_missing(path: Path) -> Path:
    """The outermost directory that making path will create (/srv, if even that is missing)."""
    while not path.parent.exists():
        path = path.parent
    return path


def ensure_node_dirs(spec: NodeSpec, rec: NodeRecord, state: LabState) -> None:
    for d in (spec.data_dir, spec.run_dir):
        if not d.exists():
            d.mkdir(parents=True)
            rec.dirs.append(str(d))
            state.save()
    spec.models_dir.mkdir(exist_ok=True)
    spec.home_dir.mkdir(mode=0o700, exist_ok=True)


def ensure_node_ns(spec: NodeSpec, rec: NodeRecord, state: LabState) -> None:
    """The node's mount, UTS and IPC namespaces (made once, then kept); needs its netns."""
    handles = (spec.mnt_ns, spec.uts_ns, spec.ipc_ns)
    if all(mounted(h) for h in handles):
        return
    release_handles([str(h) for h in handles])  # half made: start over
    for h in handles:
        h.touch()
    scratch = spec.run_dir / "cgroup-move"
    scratch.mkdir(exist_ok=True)
    rec.mounts += [str(h) for h in handles if str(h) not in rec.mounts]
    state.save()  # recorded first: if the setup fails half way, `down` still unbinds them
    run(
        [
            "nsenter",
            f"--net={spec.netns_path}",
            "unshare",
            f"--mount={spec.mnt_ns}",
            f"--uts={spec.uts_ns}",
            f"--ipc={spec.ipc_ns}",
            "--propagation",
            "slave",
            "sh",
            "-c",
            _NODE_SETUP,
            "sh",
            spec.name,
            str(scratch),
            str(spec.models_dir),
            str(spec.home_dir),
        ]
    )


def release_handles(handles: Sequence[str]) -> None:
    """Unmount namespace handles and delete their files; the namespace dies with its last
    process."""
    for h in handles:
        unmount(h)
        Path(h).unlink(missing_ok=True)


def nsenter(spec: NodeSpec) -> list[str]:
    """The argv prefix that enters the node's network, mount, UTS and IPC namespaces."""
    if not mounted(spec.mnt_ns):
        raise LabError(f"{spec.name} has no namespaces: run `python -m infergate_lab up`")
    return [
        "nsenter",
        f"--net={spec.netns_path}",
        f"--mount={spec.mnt_ns}",
        f"--uts={spec.uts_ns}",
        f"--ipc={spec.ipc_ns}",
        "--",
    ]


# Moves this sh into the cgroup whose cgroup.procs is $1, then becomes the command.
_IN_CGROUP = 'echo $$ > "$1" && shift && exec "$@"'


def in_node(spec: NodeSpec, cgroup_procs: Path, argv: Sequence[str]) -> list[str]:
    """argv run as the node runs things: in its namespaces and in its cgroup."""
    return ["sh", "-c", _IN_CGROUP, "sh", str(cgroup_procs), *nsenter(spec), *argv]
