"""The memory guard at work: one SSH session per node running the sampling loop
(checks/memguard.py), read by a thread per node; every sample (and every GPU's row) kept for
the report's curves,
and the first breach of the floor on a node where the guard is enforced handed to `on_breach`
once (docs/memory-guard.md). `stop` ends every session, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from infergate.checks.gpu_load import Sample as GpuSample
from infergate.checks.memguard import (
    MemorySample,
    check_memory_floor,
    enforced,
    sampler_script,
    ticks,
)
from infergate.plan.model import Guard, Node
from infergate.problems import Problem

REAP_S = 5.0  # for a killed session and its reader to end
HANDLER_S = 60.0  # for a breach's removal and snapshot to end


@dataclass
class NodeSamples:
    """One node's samples, its GPUs' rows, and whether a breach there stops the run (None:
    not yet known)."""

    node: Node
    enforced: bool | None = None
    samples: list[MemorySample] = field(default_factory=list)
    gpus: list[GpuSample] = field(default_factory=list)


@dataclass(frozen=True)
class Breach:
    """The first sample below the floor on an enforced node, and the judge's problems."""

    node: Node
    sample: MemorySample
    problems: list[Problem]


Argv = Callable[[Node, str], list[str]]  # the command that runs a script on a node


class MemoryGuard:
    """The sampling sessions of every node; ON_BREACH hears the first breach, once."""

    def __init__(
        self, nodes: Sequence[Node], guard: Guard, argv: Argv, on_breach: Callable[[Breach], None]
    ) -> None:
        self.guard, self.argv, self.on_breach = guard, argv, on_breach
        self.nodes = {n.name: NodeSamples(n) for n in nodes}
        self.breach: Breach | None = None
        self._lock = threading.Lock()
        self._sessions: list[subprocess.Popen[str]] = []
        self._readers: list[threading.Thread] = []
        self._handler: threading.Thread | None = None

    def start(self) -> None:
        script = sampler_script(self.guard.memory_interval_s)
        for name, kept in self.nodes.items():
            # a session of its own: a terminal's Ctrl-C reaches it only through stop()
            session = subprocess.Popen(
                self.argv(kept.node, script),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
            reader = threading.Thread(target=self._read, args=(name, session), daemon=True)
            self._sessions.append(session)
            self._readers.append(reader)
            reader.start()

    def _read(self, name: str, session: subprocess.Popen[str]) -> None:
        kept = self.nodes[name]
        assert session.stdout is not None
        lines = (line.rstrip("\n") for line in session.stdout)
        with contextlib.suppress(ValueError, OSError):  # the pipe closed under it by stop()
            for item in ticks(lines):
                if isinstance(item, bool):
                    kept.enforced = enforced(self.guard, item)
                    continue
                if isinstance(item, GpuSample):
                    kept.gpus.append(item)
                    continue
                kept.samples.append(item)
                if kept.enforced:
                    self._judge(kept, item)

    def _judge(self, kept: NodeSamples, sample: MemorySample) -> None:
        problems = check_memory_floor(sample, self.guard.memory_floor_gib)
        with self._lock:
            if not problems or self.breach is not None:
                return
            self.breach = Breach(kept.node, sample, problems)
        # its own thread: the curves go on while the run is stopped
        self._handler = threading.Thread(target=self.on_breach, args=(self.breach,), daemon=True)
        self._handler.start()

    def stop(self) -> None:
        """End every node's session (its loop ends at its next write) and its reader."""
        for session in self._sessions:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(session.pid, signal.SIGKILL)
        for session in self._sessions:
            with contextlib.suppress(subprocess.TimeoutExpired):
                session.wait(REAP_S)
        for reader in self._readers:
            reader.join(REAP_S)
        if self._handler is not None:
            self._handler.join(HANDLER_S)
