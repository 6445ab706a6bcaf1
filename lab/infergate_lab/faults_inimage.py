"""Faults the planned image sees in the model: its chat template gone from one node's copy.
Registered in faults.KINDS."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from infergate_lab.fault_kind import FaultKind, Undo
from infergate_lab.layout import NodeSpec
from infergate_lab.shell import LabError

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


KINDS = (
    FaultKind("chat-template-missing", ("MODEL",), "MODEL's chat template (chat_template.jinja, "
              "tokenizer_config.json's chat_template) removed from the node's copy",
              _template_missing, _template_back),
)  # fmt: skip
