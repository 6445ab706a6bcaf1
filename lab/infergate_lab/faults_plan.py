"""Faults against what the plan names: a port taken or dropped, a model shard missing or
corrupted, the image missing or different on one node. Registered in faults.KINDS."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from infergate.waiting import Deadline, WaitTimedOut, wait_until
from infergate_lab import docker
from infergate_lab.fault_kind import FaultKind, Undo, end_process
from infergate_lab.layout import NodeSpec
from infergate_lab.procs import Proc
from infergate_lab.shell import LabError, launch, run

if TYPE_CHECKING:
    from infergate_lab.lab import Lab

STASH_TAG = "infergate-lab/fault-stash:{node}"

# Binds every address of the node on PORT and accepts nothing: as a stray server would. Like
# every real server (uvicorn, vLLM's own socket) it sets SO_REUSEADDR, so the fault does not
# depend on whether the previous test's engine left connections in TIME_WAIT on that port.
_LISTEN = "import socket, sys, signal; s = socket.socket()"
_LISTEN += "; s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)"
_LISTEN += "; s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(); signal.pause()"


# A python that binds a port listens within a second, even on a loaded 2-core controller
LISTEN_DEADLINE = Deadline(10.0, "infergate_lab.faults_plan.LISTEN_DEADLINE")


def _port_taken(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    argv = [*lab.nsenter(spec), "/usr/bin/python3", "-c", _LISTEN, args[0]]
    proc = Proc.of(launch(argv, lab.cgroups.procs_file(spec), spec.log("port-taken")))

    def listening() -> tuple[bool | None, str]:
        if not proc.alive():
            raise LabError("the listener exited")
        found = f":{args[0]} " in lab.node_exec(spec.name, ["ss", "-Htln"]).stdout
        return (True if found else None), "not in `ss -Htln`"

    try:
        wait_until(listening, f"TCP {args[0]} listening", LISTEN_DEADLINE, every_s=0.05)
    except (LabError, WaitTimedOut):
        end_process(lab, spec, {"pid": proc.pid, "start": proc.start})
        said = spec.log("port-taken").read_text(errors="replace").strip().splitlines()
        raise LabError(
            f"{spec.name}: could not take TCP {args[0]}: {said[-1] if said else 'no output'}"
            f" (log {spec.log('port-taken')})"
        ) from None
    return {"pid": proc.pid, "start": proc.start}


def _iptables(lab: Lab, spec: NodeSpec, op: str, port: str) -> None:
    rule = ["INPUT", "-p", "tcp", "--dport", port, "-j", "DROP"]
    run(["nsenter", f"--net={spec.netns_path}", "iptables", "-w", op, *rule], timeout=15)


def _drop_port(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """Packets to PORT vanish in the node: a firewall rule, as on a host with ufw."""
    _iptables(lab, spec, "-I", args[0])
    return {"port": args[0]}


def _undrop_port(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    _iptables(lab, spec, "-D", undo["port"])


def _model_file(spec: NodeSpec, relative: str) -> Path:
    path = (spec.models_dir / relative).resolve()
    if spec.models_dir.resolve() not in path.parents or not path.is_file():
        raise LabError(f"{spec.name}: no model file {relative} under /srv/models")
    return path


def _shard_missing(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """The file is moved out of the model directory (kept, so clear puts it back)."""
    path = _model_file(spec, args[0])
    stash = spec.data_dir / "fault-stash" / path.name
    stash.parent.mkdir(exist_ok=True)
    path.rename(stash)
    return {"path": str(path), "stash": str(stash)}


def _shard_back(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    Path(undo["stash"]).rename(undo["path"])


def _flip_middle_byte(path: Path) -> int:
    """Invert the byte in the middle of the file in place, keeping size, atime and mtime."""
    info = path.stat()
    offset = info.st_size // 2
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    return offset


def _shard_corrupt(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    path = _model_file(spec, args[0])
    return {"path": str(path), "offset": _flip_middle_byte(path)}


def _shard_mend(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    _flip_middle_byte(Path(undo["path"]))  # flipping twice restores it


def _image_away(lab: Lab, spec: NodeSpec, ref: str) -> Undo:
    """Keep the image under a stash tag and take its planned name away from it."""
    stash = STASH_TAG.format(node=spec.name)
    docker.docker(spec, "tag", ref, stash)
    docker.docker(spec, "rmi", ref)  # only the tag goes: the stash tag keeps the layers
    return {"ref": ref, "stash": stash}


def _image_different(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """The planned name points at another image, as after a rebuild on one node only."""
    undo = _image_away(lab, spec, args[0])
    if not docker.image_present(spec):
        docker.make_image(spec)
    docker.docker(spec, "tag", docker.LAB_IMAGE, args[0])
    return undo


def _image_back(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    docker.docker(spec, "tag", undo["stash"], undo["ref"])
    docker.docker(spec, "rmi", undo["stash"])


KINDS = (
    FaultKind(
        "port-taken", ("PORT",), "a process in the node listens on PORT", _port_taken, end_process
    ),
    FaultKind(
        "drop-port",
        ("PORT",),
        "TCP to PORT dropped in the node (iptables)",
        _drop_port,
        _undrop_port,
    ),
    FaultKind(
        "shard-missing", ("FILE",), "FILE under /srv/models moved away", _shard_missing, _shard_back
    ),
    FaultKind(
        "shard-corrupt",
        ("FILE",),
        "one byte of FILE under /srv/models flipped, size and mtime kept",
        _shard_corrupt,
        _shard_mend,
    ),
    FaultKind(
        "image-missing",
        ("REF",),
        "the image REF untagged on the node",
        lambda lab, spec, args: _image_away(lab, spec, args[0]),
        _image_back,
        needs_docker=True,
    ),
    FaultKind(
        "image-different",
        ("REF",),
        "REF points at another image on the node",
        _image_different,
        _image_back,
        needs_docker=True,
    ),
)
