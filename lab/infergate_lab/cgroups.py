"""Each node's own memory cgroup: its limit is the node's memory, its usage the node's load.

Layout, the same on cgroup v1 and v2 (detected at run time):
    <hierarchy>/infergate-lab/nodeK          memory limit; dockerd's --cgroup-parent
    <hierarchy>/infergate-lab/nodeK/system   sshd, dockerd, fault processes
The `system` leaf exists because cgroup v2 forbids processes in a cgroup whose children get
controllers (docker's containers under nodeK do); v1 uses the same shape for one code path.
On v1 the node directories are made in every hierarchy, because runc puts each container in
`<cgroup-parent>/<id>` of all of them, and `down` must find and remove those too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infergate.waiting import Deadline, WaitTimedOut, retrying, wait_until
from infergate_lab.layout import CGROUP_ROOT, NodeSpec
from infergate_lab.shell import LabError

CGROUP_FS = Path("/sys/fs/cgroup")


def _cgroup_mounts() -> list[tuple[str, Path]]:
    """(fstype, mount point) of every cgroup file system, from /proc/self/mountinfo."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, after = line.partition(" - ")
        fstype = after.split()[0]
        if fstype in ("cgroup", "cgroup2"):
            found.append((fstype, Path(fields.split()[4])))
    return found


@dataclass(frozen=True)
class Cgroups:
    version: int  # 1: memory controller in its own hierarchy; 2: unified
    memory_root: Path  # the hierarchy that holds the memory controller
    hierarchies: tuple[Path, ...]  # every hierarchy the node directories are made in

    @classmethod
    def detect(cls) -> Cgroups:
        if (CGROUP_FS / "cgroup.controllers").exists():
            return cls(2, CGROUP_FS, (CGROUP_FS,))
        mounts = _cgroup_mounts()
        if not any(m == CGROUP_FS / "memory" for _, m in mounts):
            raise LabError("no cgroup memory controller at /sys/fs/cgroup{,/memory}")
        return cls(1, CGROUP_FS / "memory", tuple(m for _, m in mounts))

    def node_dir(self, spec: NodeSpec, hierarchy: Path | None = None) -> Path:
        return (hierarchy or self.memory_root) / spec.cgroup.lstrip("/")

    def procs_file(self, spec: NodeSpec) -> Path:
        """Writing a pid here puts that process (and its future children) in the node."""
        return self.node_dir(spec) / "system" / "cgroup.procs"

    def _limit_file(self, spec: NodeSpec) -> Path:
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        return self.node_dir(spec) / name

    def usage(self, spec: NodeSpec, child: str = "") -> int:
        """Memory charged to the node (or to one child cgroup of it, e.g. a container)."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        try:
            return int((self.node_dir(spec) / child / name).read_text())
        except FileNotFoundError:
            return 0

    def limit(self, spec: NodeSpec) -> int:
        text = self._limit_file(spec).read_text().strip()
        return -1 if text == "max" else int(text)

    def create_root(self) -> list[Path]:
        """The lab's own directory in every hierarchy; returns those that were new."""
        return [d for d in (h / CGROUP_ROOT for h in self.hierarchies) if _mkdir(d)]

    def create(self, spec: NodeSpec, limit_bytes: int) -> list[Path]:
        """Make the node's directories (parents first); return those that were new."""
        made = [d for d in (self.node_dir(spec, h) for h in self.hierarchies) if _mkdir(d)]
        system = self.node_dir(spec) / "system"
        if self.version == 2:
            self._enable_memory(spec)
        if _mkdir(system):
            made.append(system)
        self._limit_file(spec).write_text(str(limit_bytes))
        return made

    def _enable_memory(self, spec: NodeSpec) -> None:
        # v2 hands a controller to children only if every ancestor enables it for them.
        for d in (CGROUP_FS, CGROUP_FS / CGROUP_ROOT, self.node_dir(spec)):
            (d / "cgroup.subtree_control").write_text("+memory")

    def pids(self, spec: NodeSpec) -> set[int]:
        """Every process anywhere under the node's cgroup, in any hierarchy."""
        found: set[int] = set()
        for h in self.hierarchies:
            for procs in self.node_dir(spec, h).rglob("cgroup.procs"):
                try:
                    found |= {int(p) for p in procs.read_text().split()}
                except OSError:
                    continue  # removed while we walked: its processes are gone
        return found


def _mkdir(d: Path) -> bool:
    if d.exists():
        return False
    d.mkdir()
    return True


# A cgroup's exiting tasks drain in milliseconds once their processes are gone
REMOVE_DEADLINE = Deadline(10.0, "infergate_lab.cgroups.REMOVE_DEADLINE")


def remove_tree(top: Path) -> None:
    """rmdir a cgroup and all below it, deepest first; retry while exiting tasks drain."""

    def remove() -> None:
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, top] if top.exists() else []:
            d.rmdir()

    try:
        wait_until(retrying(remove), f"cgroup {top} removed", REMOVE_DEADLINE, every_s=0.1)
    except WaitTimedOut as e:
        raise LabError(f"cannot remove cgroup {top}: {e}") from None
