"""Each node's Docker Engine API client, opened on first use over the SSH master its Remote
uses and closed with the ExitStack it was handed. An engine that cannot be reached is asked
once: every later call fails at once with the same words, as an unreachable node's do.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import docker

from infergate.plan.model import Node
from infergate.remote.docker_api import EngineUnreachable, node_engine
from infergate.remote.ssh import Remote


class Engines(Mapping[str, docker.DockerClient]):
    """The nodes' engine clients by node name; `of(node)` (or `[name]`) opens one on first
    use."""

    def __init__(self, remotes: dict[str, Remote], stack: contextlib.ExitStack, workdir: Path):
        self._remotes, self._stack, self._workdir = remotes, stack, workdir
        self._nodes = {name: remote.node for name, remote in remotes.items()}
        self._opened: dict[str, docker.DockerClient | EngineUnreachable] = {}
        self._locks = {name: threading.Lock() for name in remotes}
        self._stack_lock = threading.Lock()

    def of(self, node: Node) -> docker.DockerClient:
        """NODE's engine client; EngineUnreachable names the node, what failed and the fix."""
        with self._locks[node.name]:
            if node.name not in self._opened:
                self._opened[node.name] = self._open(node)
            found = self._opened[node.name]
        if isinstance(found, EngineUnreachable):
            raise EngineUnreachable(str(found))
        return found

    def __getitem__(self, name: str) -> docker.DockerClient:
        return self.of(self._nodes[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def _open(self, node: Node) -> docker.DockerClient | EngineUnreachable:
        opening = node_engine(node, self._remotes[node.name].config, self._workdir)
        try:
            client = opening.__enter__()
        except EngineUnreachable as e:
            return e
        with self._stack_lock:  # closed at the session's end, in the reverse order
            self._stack.push(opening.__exit__)
        return client
