"""Faults the planned image meets on one node: its model's chat template gone from the node's
copy; the node's dockerd capping every container's open files; a cache directory the launch
mounts read-only in the node. Registered in faults.KINDS."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from infergate_lab import services
from infergate_lab.fault_kind import FaultKind, Undo
from infergate_lab.layout import NodeSpec
from infergate_lab.shell import LabError, run

if TYPE_CHECKING:
    from infergate_lab.lab import Lab

TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"


def _model_dir(spec: NodeSpec, name: str) -> Path:
    path = (spec.models_dir / name).resolve()
    if spec.models_dir.resolve() not in path.parents or not path.is_dir():
        raise LabError(f"{spec.name}: no model directory {name} under /srv/models")
    return path


def _template_missing(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """MODEL's chat_template.jinja moved away, and tokenizer_config.json's chat_template
    left out (the original kept): as a copy made without the template."""
    model = _model_dir(spec, args[0])
    stash = spec.data_dir / "fault-stash" / f"chat-template-{model.name}"
    stash.mkdir(parents=True, exist_ok=True)
    tokenizer = model / TOKENIZER_CONFIG
    config = json.loads(tokenizer.read_text()) if tokenizer.is_file() else {}
    moved = [name for name in (TEMPLATE_FILE,) if (model / name).is_file()]
    moved += [TOKENIZER_CONFIG] if "chat_template" in config else []
    if not moved:
        raise LabError(f"{spec.name}: {model} has no chat template to remove")
    for name in moved:
        shutil.copy2(model / name, stash / name)
    (model / TEMPLATE_FILE).unlink(missing_ok=True)
    if "chat_template" in config:
        del config["chat_template"]
        tokenizer.write_text(json.dumps(config, indent=2))
    return {"model": str(model), "stash": str(stash), "moved": moved}


def _template_back(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    stash, model = Path(undo["stash"]), Path(undo["model"])
    for name in undo["moved"]:
        shutil.copy2(stash / name, model / name)
        (stash / name).unlink()
    stash.rmdir()


def _restart_dockerd(lab: Lab, spec: NodeSpec, extra: list[str]) -> None:
    """The node's dockerd stopped and started again with EXTRA flags (none: as the lab runs
    it); its images stay, in the same data root."""
    state = lab.state
    services.stop_service(state, spec, "dockerd")
    services.wait_ready(state, services.start(state, lab.cgroups, [spec], ["dockerd"], extra))


def _docker_ulimit(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """dockerd restarted with `--default-ulimit nofile=NOFILE:NOFILE`: every container it
    starts gets that limit unless its own --ulimit says otherwise, as a site's daemon.json
    default-ulimits (or a LimitNOFILE the containers inherit) makes it."""
    if not args[0].isdigit() or int(args[0]) < 1:
        raise LabError(f"docker-ulimit takes NOFILE, a count of open files, got {args[0]!r}")
    try:
        _restart_dockerd(lab, spec, [f"--default-ulimit=nofile={args[0]}:{args[0]}"])
    except LabError:
        _restart_dockerd(lab, spec, [])
        raise
    return {}


def _docker_normal(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    _restart_dockerd(lab, spec, [])


# $1 the directory (made where missing, as `docker run -v` makes it): bound onto itself in the
# node's mount namespace, that bind then remounted read-only (undone if the remount fails)
_READ_ONLY = """set -e
mkdir -p "$1"
mount --bind "$1" "$1"
mount -o remount,bind,ro "$1" || { umount "$1"; exit 1; }
"""


def _cache_readonly(lab: Lab, spec: NodeSpec, args: list[str]) -> Undo:
    """PATH read-only in the node only: a container's `-v PATH:DIR` is read-only too (a bind
    keeps its source's read-only flag), as a cache on a read-only export would be."""
    if not args[0].startswith("/"):
        raise LabError(f"cache-readonly takes an absolute PATH, got {args[0]!r}")
    run([*lab.nsenter(spec), "sh", "-c", _READ_ONLY, "sh", args[0]])
    return {"path": args[0]}


def _cache_writable(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    run([*lab.nsenter(spec), "umount", undo["path"]])


KINDS = (
    FaultKind(
        "chat-template-missing",
        ("MODEL",),
        "MODEL's chat template (chat_template.jinja, "
        "tokenizer_config.json's chat_template) removed from the node's copy",
        _template_missing,
        _template_back,
    ),
    FaultKind(
        "docker-ulimit",
        ("NOFILE",),
        "the node's dockerd restarted with --default-ulimit nofile=NOFILE:NOFILE",
        _docker_ulimit,
        _docker_normal,
        needs_docker=True,
    ),
    FaultKind(
        "cache-readonly",
        ("PATH",),
        "PATH read-only in the node (a read-only bind mount of it onto itself)",
        _cache_readonly,
        _cache_writable,
    ),
)
