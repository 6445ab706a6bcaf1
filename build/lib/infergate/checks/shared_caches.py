"""Compile caches that nodes would share: engines on several nodes compiling into one cache
directory clobber each other's artifacts (docs/checks.md#shared-caches). Judged on each
writable place the container gets from the host; a read-only volume (a model on NFS) is no
cache.
"""

from __future__ import annotations

from collections.abc import Mapping

from infergate.checks.disk import ContainerPlan, Mount, cache_dirs, host_path
from infergate.problems import Problem

# Network and cluster file systems, as findmnt's FSTYPE names them; and any FUSE file system
# (fuse.sshfs, fuse.s3fs, fuse.juicefs, fuse.gcsfuse, fuse.glusterfs, ...)
NETWORK_FSTYPES = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs"}
)
# Local file systems: two nodes may show the same source (`/dev/sda1`, a ZFS `rpool/cache`)
# for two different disks
LOCAL_FSTYPES = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "vfat", "tmpfs", "overlay", "ramfs"}
)


def writable_places(plan: ContainerPlan) -> dict[str, str]:
    """Host path -> what the container writes there: each mapped cache, each writable volume."""
    places = {}
    for name, path in cache_dirs(plan.env).items():
        mapped = host_path(path, plan.volumes)
        if mapped is not None:
            places[mapped] = f"{name}={path}"
    for v in plan.volumes:
        if v.source.startswith("/") and not v.read_only:
            places.setdefault(v.source, f"volume {v.source}:{v.target}")
    return places


def is_network(mount: Mount) -> bool:
    return mount.fstype in NETWORK_FSTYPES or mount.fstype.split(".")[0] == "fuse"


def check_caches_local(places: Mapping[str, str], mounts: Mapping[str, Mount]) -> list[Problem]:
    """No writable place of the container is on a network or FUSE file system."""
    return [
        Problem(
            found=f"{what} is on {mounts[path].fstype} {mounts[path].source} "
            f"(mounted at {mounts[path].target or path})",
            planned="each node's compile and JIT caches on its own local disk",
            remedy=_local_remedy(path, what),
        )
        for path, what in places.items()
        if path in mounts and is_network(mounts[path])
    ]


def _local_remedy(path: str, what: str) -> str:
    name = what.partition("=")[0]
    if what.startswith("volume"):
        return (
            f"map {path}'s volume to a local directory (`mkdir -p /var/cache/engine` on each "
            "node, then `-v /var/cache/engine:...` in engine.docker_args)"
        )
    return (
        f"give {name} a node-local directory: `mkdir -p /var/cache/engine/{name.lower()}` on "
        f"each node and map it in engine.docker_args instead of {path}"
    )


def check_caches_not_shared(
    places: Mapping[str, Mapping[str, str]], mounts: Mapping[str, Mapping[str, Mount]]
) -> dict[str, list[Problem]]:
    """No two nodes write one file system: the same source of a file system that is not a
    local disk's (`places` and `mounts` by node name). Each such node is named."""
    seen: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for node, node_places in places.items():
        for path, what in node_places.items():
            # a network one is check_caches_local's finding
            mount = mounts[node].get(path)
            if mount is not None and mount.fstype not in LOCAL_FSTYPES and not is_network(mount):
                seen.setdefault((mount.fstype, mount.source), []).append((node, what))
    problems: dict[str, list[Problem]] = {}
    for (fstype, source), users in seen.items():
        nodes = sorted({n for n, _ in users})
        if len(nodes) < 2:
            continue
        for node, what in users:
            others = ", ".join(n for n in nodes if n != node)
            problems.setdefault(node, []).append(
                Problem(
                    found=f"{what} is on {fstype} {source}, which {others} also write(s)",
                    planned="each node's compile and JIT caches its own (vLLM#24601)",
                    remedy=_local_remedy(what.partition("=")[2] or source, what),
                )
            )
    return problems


def check_shared_caches(
    places: Mapping[str, Mapping[str, str]], mounts: Mapping[str, Mapping[str, Mount]]
) -> dict[str, list[Problem]]:
    """Both rules, by node: no cache on a network file system, none that two nodes write."""
    problems = check_caches_not_shared(places, mounts)
    for node, node_places in places.items():
        local = check_caches_local(node_places, mounts[node])
        if local:
            problems[node] = [*local, *problems.get(node, [])]
    return problems
