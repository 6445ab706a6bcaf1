"""One launch's state: what the gates, the watch and the failure text read and update.

`LaunchState` holds the launch, its nodes and their I/O, the streams and their news, each
node's watch and the clock. Its invariant: every text it keeps, says, runs back or raises
has passed through `hide` (vLLM logs its arguments, the API key among them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, Protocol

from docker import DockerClient
from docker.models.containers import Container

from infergate.deploy.api import HttpAnswer, http_get
from infergate.deploy.failure import LaunchFailed, failure_text
from infergate.deploy.streams import News, Streams
from infergate.deploy.watch import Heartbeat, NodeWatch, Process
from infergate.engines.launch import Launch
from infergate.plan.apikey import ApiKey, redact
from infergate.plan.model import Node
from infergate.problems import Problem
from infergate.remote.docker_api import EngineUnreachable
from infergate.remote.ssh import Ran


class NodeIo(Protocol):
    """Run COMMAND on NODE within TIMEOUT_S; INPUT is its standard input (the env file of a
    container: secrets travel there, never on a command line)."""

    def __call__(
        self, node: str, command: str, timeout_s: float, input: str | None = None
    ) -> Ran: ...


Say = Callable[[str], None]


@dataclass(frozen=True)
class DeployOptions:
    """What a deploy keeps, sends and hides, and how it reaches each node's engine.

    Sample: ``DeployOptions(evidence=Path("reports/r1/evidence"), api_key=key)``
    """

    evidence: Path | None = None
    keep: bool = False
    api_key: ApiKey | None = None
    secrets: tuple[str, ...] = ()  # the plan's (infergate.plan.secrets.plan_secrets)
    inventory_path: str | None = None  # named in the removal's remedy
    ca_bundle: str | None = None  # https verified against it (None: certifi's CAs)
    engines: Mapping[str, DockerClient] = field(default_factory=dict)


class LaunchState:
    """What one launch reaches and has seen so far; the gates and the watch take it."""

    def __init__(
        self, launch: Launch, nodes: dict[str, Node], io: NodeIo, say: Say, options: DeployOptions
    ) -> None:
        self.launch, self.nodes, self.tell = launch, nodes, say
        self.api_key, self.ca_bundle = options.api_key, options.ca_bundle
        self.evidence = options.evidence
        self.engines = options.engines
        key_secrets = options.api_key.secrets() if options.api_key else ()
        self.secrets = (*options.secrets, *key_secrets)
        self.io = hiding(io, self.hide)
        self.watches = {n: NodeWatch(c) for n, c in launch.containers.items()}
        self.head = next(iter(launch.containers), "")
        self.started_at = time.monotonic()
        self.streams = Streams()
        self.news: list[News] = []
        self.lost: dict[str, list[News]] = {}  # node -> its streams that ended unclosed
        self.heartbeat = Heartbeat()
        self.ready_processes: dict[str, list[Process]] = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    def say(self, line: str) -> None:
        self.tell(self.hide(line))

    def hide(self, text: str) -> str:
        """TEXT without the plan's secrets, the API key (and the keys it overrides)."""
        return redact(text, self.secrets)

    def where(self, node: str) -> str:
        return self.nodes[node].where

    def started(self) -> list[str]:
        """The nodes whose engine container (or process) was started."""
        return [n for n, w in self.watches.items() if w.started]

    def engine(self, node: str) -> DockerClient:
        """NODE's Docker Engine API; one that cannot be reached ends the launch, named."""
        try:
            return self.engines[node]
        except EngineUnreachable as e:
            heading = f"launch of {self.launch.engine} (run {self.launch.run_id}) failed"
            raise LaunchFailed(self.hide(f"{heading} after {self.elapsed():.1f} s: {e}")) from None

    def container(self, node: str) -> Container:
        return self.engine(node).containers.get(self.watches[node].container)

    def wait_for_news(self, seconds: float) -> None:
        """Between two looks of a gate: until a node says something, or SECONDS passed."""
        self.news += self.streams.wait(seconds)

    def get(self, path: str, timeout_s: float) -> HttpAnswer:
        """GET a path of the head's API, with the key."""
        return http_get(self.launch.endpoint + path, timeout_s, self.api_key, self.ca_bundle)

    def fail(
        self,
        problems: dict[str, list[Problem]],
        at: str = "",
        stacks: Sequence[str] = (),
        at_s: float | None = None,
    ) -> NoReturn:
        """Stop the launch: PROBLEMS per node, at the gate AT (AT_S: when it was found),
        with where each rank waits (STACKS) and every node's tail."""
        where = {n: self.where(n) for n in self.nodes}
        elapsed_s = self.elapsed() if at_s is None else at_s
        text = failure_text(
            self.launch, self.watches, where, problems, at, elapsed_s, self.evidence, stacks
        )
        raise LaunchFailed(self.hide(text))


def hiding(io: NodeIo, hide: Callable[[str], str]) -> NodeIo:
    """The node I/O whose answers come back through HIDE."""

    def run(node: str, command: str, timeout_s: float, input: str | None = None) -> Ran:
        done = io(node, command, timeout_s, input)
        return Ran(done.exit_status, hide(done.stdout), hide(done.stderr))

    return run
