"""A node short of disk space where the engine writes. Registered in faults.KINDS.

The node's view of PATH gets an overlay whose writable layer is a tmpfs of GIB_LEFT: what is
there stays readable, `statfs` (df, findmnt) reports the tmpfs's free space, and a write past
it fails with ENOSPC, as on a full disk. Only the node's mount namespace sees it, so the
machine's own disk, which every node and the controller share, is never filled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infergate_lab.fault_kind import FaultKind, Undo
from infergate_lab.layout import NodeSpec
from infergate_lab.shell import LabError, run

if TYPE_CHECKING:
    from infergate_lab.lab import Lab

# $1 the path, $2 a scratch directory for the tmpfs, $3 its size in bytes
_FILL = """set -e
mkdir -p "$2"
mount -t tmpfs -o size="$3" disk-full "$2"
mkdir "$2/upper" "$2/work"
mount -t overlay -o lowerdir="$1",upperdir="$2/upper",workdir="$2/work" disk-full "$1"
"""
_EMPTY = 'umount "$1"; umount "$2"; rmdir "$2"'


def _disk_full(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    path, left = args[0], float(args[1])
    if not path.startswith("/") or left <= 0:
        raise LabError(f"disk-full takes an absolute PATH and GIB_LEFT > 0, got {args}")
    make = '[ -e "$1" ] || { mkdir -p "$1"; echo made; }'
    made = run([*lab.nsenter(spec), "sh", "-c", make, "sh", path]).stdout.strip() == "made"
    scratch = str(spec.run_dir / "disk-full")
    undo = {"path": path, "scratch": scratch, "made": made}
    try:
        run([*lab.nsenter(spec), "sh", "-c", _FILL, "sh", path, scratch, str(int(left * 2**30))])
    except LabError:
        _disk_back(lab, spec, undo)
        raise
    return undo


def _disk_back(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    args = [undo["path"], undo["scratch"]]
    run([*lab.nsenter(spec), "sh", "-c", _EMPTY, "sh", *args], check=False)
    if undo["made"]:
        run([*lab.nsenter(spec), "rmdir", undo["path"]], check=False)


KINDS = (
    FaultKind(
        "disk-full",
        ("PATH", "GIB_LEFT"),
        "PATH in the node on a file system with only GIB_LEFT free (an overlay on a small tmpfs)",
        _disk_full,
        _disk_back,
    ),
)
