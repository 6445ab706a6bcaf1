"""What a fault kind is: its name, arguments, help, and the two functions that make and undo it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infergate_lab.layout import NodeSpec
from infergate_lab.procs import Proc, stop

if TYPE_CHECKING:
    from infergate_lab.lab import Lab

Undo = dict[str, Any]


@dataclass(frozen=True)
class FaultKind:
    name: str
    args: tuple[str, ...]  # names of the arguments after NODE, for usage and checking
    help: str
    apply: Callable[[Lab, NodeSpec, list[str]], Undo]
    clear: Callable[[Lab, NodeSpec, Undo], None]
    # it drives the node's dockerd or images: refused in a lab of sshd only, where its clear
    # would start a dockerd the lab does not run
    needs_docker: bool = False


def end_process(lab: Lab, spec: NodeSpec, undo: Undo) -> None:
    """The clear of a fault that is a process: end it (recorded by pid and start time)."""
    stop([Proc(undo["pid"], undo["start"])])
