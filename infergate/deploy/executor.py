"""The deploy handle: perform a Launch on the nodes, milestone by milestone, and undo it.

`Deployment` starts this run's containers (starting.py), waits at each gate (gates.py) and,
on leaving, saves the evidence and removes exactly the containers with this run's label, on
every node, whatever happened. A launch refused before it started anything removes nothing.
"""

from __future__ import annotations

import time
from contextlib import suppress
from pathlib import Path
from types import TracebackType

from infergate.deploy import gates, news, starting
from infergate.deploy.api import HttpAnswer
from infergate.deploy.evidence import save_evidence
from infergate.deploy.failure import unreached
from infergate.deploy.forensics import take_stacks
from infergate.deploy.removal import remove_launch, stop_hint
from infergate.deploy.state import DeployOptions, LaunchState, NodeIo, Say
from infergate.deploy.watch import NodeWatch
from infergate.engines.launch import Exec, Launch, Start, Step
from infergate.plan.apikey import ApiKey
from infergate.plan.model import Node
from infergate.problems import Problem
from infergate.remote.fanout import each


class Deployment:
    """The deploy handle: start this run's containers, watch them, keep the evidence, and
    remove exactly them on leaving (unless kept)."""

    def __init__(
        self,
        launch: Launch,
        nodes: dict[str, Node],
        io: NodeIo,
        say: Say,
        options: DeployOptions | None = None,
    ) -> None:
        self.options = options or DeployOptions()
        self.state = LaunchState(launch, nodes, io, say, self.options)
        # a handle that started nothing has nothing of its own to remove
        self.touched = False

    def __enter__(self) -> Deployment:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Save the evidence, then remove this run's containers (unless kept); a handle that
        started nothing (refused) removes nothing."""
        self.state.streams.close()
        if not self.touched:
            return
        try:
            self.save_evidence()
        finally:
            if self.options.keep:
                hint = stop_hint(self.launch.run_id, self.options.inventory_path)
                self.say(f"kept running (--keep-deployment); stop it with: {hint}")
            else:
                self.stop()

    def perform(self, steps: tuple[Step, ...] | None = None) -> None:
        """Run the steps in order; each gate waits for its milestone until its deadline and
        fails at once on a fatal line or an exited container."""
        s = self.state
        s.started_at = time.monotonic()
        steps = s.launch.steps if steps is None else steps
        if any(isinstance(step, Start) for step in steps):
            starting.refuse_taken(s)
            # before the first start, so that no event is missed
            starting.follow_events(s)
        self.touched = True
        for step in steps:
            if isinstance(step, Start | Exec):
                starting.start(s, step)
            else:
                gates.wait_for(s, step)
        s.ready_processes = each(s.started(), lambda node: news.processes(s, node))
        s.say(f"[{s.elapsed():6.1f} s] ready: {s.launch.endpoint}/v1")

    def stop(self) -> None:
        """Remove this run's containers on every node, and prove it (removal.py)."""
        remove_launch(self.state, self.options.inventory_path)

    def save_evidence(self) -> None:
        """Each node's container log, inspection and kernel OOM lines, when kept (evidence)."""
        if self.evidence is not None:
            save_evidence(self.state, self.evidence)

    def unreached(self) -> dict[str, list[Problem]]:
        """Per node, the milestones planned for it that its log never showed."""
        return unreached(self.launch, self.watches)

    def catch_up(self, node: str) -> NodeWatch:
        """The node's container state and log lines, with what the kernel OOM-killed in it."""
        return news.catch_up(self.state, node)

    def stacks(self, when: str) -> list[str]:
        """Where each engine process waits now, a request having hung past its deadline (the
        lines of forensics.py), kept as evidence/NODE/stacks-WHEN.txt with the last lines."""
        for node in self.state.started():
            with suppress(Exception):  # a node that cannot answer: its stacks' line says why
                self.catch_up(node)
        return take_stacks(self.state, when)

    def rank_problems(self, node: str) -> list[Problem]:
        """What shows NODE's rank dead: its container stopped, a process gone since ready."""
        return news.rank_problems(self.state, node)

    def get(self, path: str, timeout_s: float) -> HttpAnswer:
        """GET a path of the head's API, with the key."""
        return self.state.get(path, timeout_s)

    def say(self, line: str) -> None:
        self.state.say(line)

    def hide(self, text: str) -> str:
        return self.state.hide(text)

    @property
    def launch(self) -> Launch:
        return self.state.launch

    @property
    def api_key(self) -> ApiKey | None:
        return self.state.api_key

    @property
    def io(self) -> NodeIo:
        return self.state.io

    @property
    def watches(self) -> dict[str, NodeWatch]:
        return self.state.watches

    @property
    def evidence(self) -> Path | None:
        """Where close() saves the evidence, and the failure text points."""
        return self.state.evidence

    @evidence.setter
    def evidence(self, folder: Path | None) -> None:
        self.state.evidence = folder
