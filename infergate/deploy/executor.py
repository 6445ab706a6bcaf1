"""Perform a Launch on the nodes, milestone by milestone, and undo it.

`Deployment` is the deploy handle: a context manager that starts this run's containers in
the engine's order and, on leaving, saves the evidence and removes exactly the containers
that carry this run's label, on every node, whatever happened, and proves it by a separate
listing. A launch whose run id or container names are already on a node is refused before it
starts anything, and then removes nothing (they are not its own). The node I/O is handed in
(`NodeIo`): the fixtures give it SSH, the lab's selftests the same.

With an API key, every HTTP call carries it, and every text read from the nodes (engine
logs, `docker top`, `docker inspect`) is redacted before the handle keeps, says or writes it:
vLLM logs its arguments, the key among them.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Protocol, TypeVar

from docker import DockerClient
from docker.errors import NotFound
from docker.models.containers import Container

from infergate.checks.containers import down_command
from infergate.deploy import gates
from infergate.deploy.failure import (
    LaunchFailed,
    exited,
    failure_text,
    logs_remedy,
    lost_problem,
    oom_problem,
    unreached,
    watch_problems,
)
from infergate.deploy.removal import remove_run, taken_names
from infergate.deploy.runs import check_run_not_taken, node_remove_hint
from infergate.deploy.streams import News, Streams
from infergate.deploy.watch import (
    Heartbeat,
    NodeWatch,
    Process,
    apply_event,
    apply_inspect,
    behind,
    last_said,
    oom_command,
    parse_oom_kills,
    parse_top,
    scan,
)  # fmt: skip
from infergate.engines.labels import RUN_LABEL
from infergate.engines.launch import Exec, Gate, Launch, Start, Step
from infergate.plan.apikey import ApiKey, redact
from infergate.plan.model import Node
from infergate.plan.secrets import private_dir, write_private
from infergate.problems import Problem, describe_all
from infergate.remote import http_session
from infergate.remote.docker_api import API_ERRORS, EngineUnreachable, create_container, engine_said

SETTLE_S = 3.0  # after a Traceback line, how long its cause may take to follow
LOG_END_S = 2.0  # after a container stopped, for the rest of its log to arrive
QUERY_S = 30.0  # a dmesg grep: it answers within a second
START_S = 120.0  # `docker run -d`: a container with GPUs, HCAs and mounts created
EVIDENCE_S = 60.0  # a whole log, `docker inspect`, dmesg
KERNEL_OOM = "dmesg 2>&1 | grep -iE 'out of memory|oom|killed process' | tail -50"


class Ran(Protocol):
    exit_status: int
    stdout: str
    stderr: str


class NodeIo(Protocol):
    """Run COMMAND on NODE within TIMEOUT_S; INPUT is its standard input (the env file of a
    container: secrets travel there, never on a command line)."""

    def __call__(
        self, node: str, command: str, timeout_s: float, input: str | None = None
    ) -> Ran: ...


Say = Callable[[str], None]
T = TypeVar("T")


@dataclass
class Heard:
    """What a node said, as `Ran` reads it (redacted)."""

    exit_status: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: str


def http_get(
    url: str, timeout_s: float, key: ApiKey | None = None, ca_bundle: str | None = None
) -> HttpAnswer:
    """GET URL (with the key as a bearer token); a refused or timed-out connection reads as
    status 0 with the socket's reason."""
    session = http_session.session_for(url, key.value if key else None, ca_bundle)
    try:
        r = session.get(url, timeout=http_session.timeouts(timeout_s))
    except http_session.ERRORS as e:
        return HttpAnswer(0, str(http_session.reason(e)))
    return HttpAnswer(r.status_code, r.content.decode(errors="replace"))


class Deployment:
    """The deploy handle: start this run's containers, watch them, keep the evidence, and
    remove exactly them on leaving (unless kept). The gates (gates.py) wait on it; the
    failure's text is failure.py's."""

    def __init__(
        self,
        launch: Launch,
        nodes: dict[str, Node],
        io: NodeIo,
        say: Say,
        evidence: Path | None = None,
        keep: bool = False,
        api_key: ApiKey | None = None,
        secrets: tuple[str, ...] = (),  # the plan's (infergate.plan.secrets.plan_secrets)
        inventory_path: str | None = None,  # for the removal's remedy
        ca_bundle: str | None = None,  # https verified against it (None: certifi's CAs)
        engines: Mapping[str, DockerClient] | None = None,  # each node's Docker Engine API
    ) -> None:
        self.launch, self.nodes, self.api_key, self.ca_bundle = launch, nodes, api_key, ca_bundle
        self.inventory_path = inventory_path
        self.touched = False  # whether this handle started anything: else nothing to remove
        self.secrets = (*secrets, *(api_key.secrets() if api_key else ()))
        self.io, self._say = hiding(io, self.hide), say
        self.evidence, self.keep = evidence, keep
        self.watches = {n: NodeWatch(c) for n, c in launch.containers.items()}
        self.head = next(iter(launch.containers), "")
        self.started_at = time.monotonic()
        self.ready_processes: dict[str, list[Process]] = {}
        self.engines: Mapping[str, DockerClient] = engines or {}
        self.streams = Streams()
        self._news: list[News] = []
        self._lost: dict[str, list[News]] = {}  # node -> its streams that ended unclosed
        self._pool = ThreadPoolExecutor(max(1, len(nodes)))
        self.heartbeat = Heartbeat()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Save the evidence, then remove this run's containers (unless kept); a handle that
        started nothing (refused) removes nothing."""
        self.streams.close()
        if not self.touched:
            self._pool.shutdown()
            return
        try:
            self.save_evidence()
        finally:
            if self.keep:
                self.say(f"kept running (--keep-deployment); stop it with: {self.stop_hint()}")
            else:
                self.stop()
            self._pool.shutdown()

    # -- the launch

    def perform(self, steps: tuple[Step, ...] | None = None) -> None:
        """Run the steps in order; each gate waits for its milestone until its deadline and
        fails at once on a fatal line or an exited container."""
        self.started_at = time.monotonic()
        steps = self.launch.steps if steps is None else steps
        if any(isinstance(s, Start) for s in steps):
            self.refuse_taken()
            label = f"{RUN_LABEL}={self.launch.run_id}"
            for node in self.launch.containers:  # before the first start: none missed
                self.streams.follow_events(node, self._engine(node), label)
        self.touched = True
        for step in steps:
            if isinstance(step, Start | Exec):
                self._start(step)
            else:
                gates.wait_for(self, step)
        started = [n for n, w in self.watches.items() if w.started]
        self.ready_processes = self._each(self.processes, started)
        self.say(f"[{self.elapsed():6.1f} s] ready: {self.launch.endpoint}/v1")

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    def say(self, line: str) -> None:
        self._say(self.hide(line))

    def hide(self, text: str) -> str:
        """TEXT without the plan's secrets, the API key (and the keys it overrides)."""
        return redact(text, self.secrets)

    def get(self, path: str, timeout_s: float) -> HttpAnswer:
        """GET a path of the head's API, with the key."""
        return http_get(self.launch.endpoint + path, timeout_s, self.api_key, self.ca_bundle)

    def refuse_taken(self) -> None:
        """Refuse to start when a container with one of this run's names or its label is
        already on a node: this run's teardown removes by label, so it would remove them."""
        problems = {n: p for n, p in self._each(self._taken, list(self.nodes)).items() if p}
        if problems:
            heading = f"launch of {self.launch.engine} (run {self.launch.run_id}) refused, "
            text = [heading + "nothing started:"]
            text += [describe_all(self._where(n), p) for n, p in problems.items()]
            raise LaunchFailed(self.hide("\n".join(text)))

    def _taken(self, node: str) -> list[Problem]:
        names = list(self.launch.containers.values())
        try:
            taken = taken_names(self.engines[node], self.launch.run_id, names)
        except (EngineUnreachable, *API_ERRORS) as e:
            said = engine_said(e).splitlines()[0]
            return [Problem(f"listing its containers failed: {said}",
                            "Docker answering before the launch",
                            _start_remedy(said, self.nodes[node], self.launch))]  # fmt: skip
        return check_run_not_taken(self.launch.run_id, taken)

    def _start(self, step: Start | Exec) -> None:
        """Create and start STEP's container, or its process in one, through the node's
        Engine API; the engine's refusal fails the launch at once, with its words."""
        engine = self._engine(step.node)
        try:
            if isinstance(step, Start):
                container = create_container(engine, step.spec, step.command, step.container,
                                             dict(step.labels))  # fmt: skip
                container.start()
            else:
                engine.containers.get(step.container).exec_run(step.detached(), detach=True)
        except API_ERRORS as e:  # the engine's refusal, or its connection lost
            said = self.hide(engine_said(e))
            verb = "creating and starting" if isinstance(step, Start) else "the exec in"
            self.fail({step.node: [Problem(
                f"{verb} {step.container} failed: {said}",
                f"the engine container {step.container} started",
                _start_remedy(said, self.nodes[step.node], self.launch))]})  # fmt: skip
        self.watches[step.node].started = True
        if isinstance(step, Start):
            self._follow(step.node, container)
        verb = "started" if isinstance(step, Start) else "launched in"
        self.say(f"[{self.elapsed():6.1f} s] {self._where(step.node)}: {verb} {step.container}")

    def _follow(self, node: str, container: Container) -> None:
        """Follow the container just started: its state now, its log from its first line."""
        container.reload()
        apply_inspect(self.watches[node], container.attrs)
        self.streams.follow_log(node, container)

    def exec_in(self, node: str, argv: tuple[str, ...]) -> str:
        """ARGV run in NODE's engine container, to its end: what it printed (redacted); an
        engine that cannot run it ends the launch, in its own words."""
        try:
            output = self._container(node).exec_run(list(argv)).output  # whole: not streamed
        except API_ERRORS as e:
            container = self.watches[node].container
            self.fail({node: [Problem(
                f"`{shlex.join(argv)}` in {container} failed: {self.hide(engine_said(e))}",
                f"{shlex.join(argv)} answering in {container}",
                logs_remedy(self.watches[node]))]})  # fmt: skip
        return self.hide(output.decode(errors="replace") if isinstance(output, bytes) else "")

    def _engine(self, node: str) -> DockerClient:
        """NODE's Docker Engine API; one that cannot be reached ends the launch, named."""
        try:
            return self.engines[node]
        except EngineUnreachable as e:
            heading = f"launch of {self.launch.engine} (run {self.launch.run_id}) failed"
            raise LaunchFailed(self.hide(f"{heading} after {self.elapsed():.1f} s: {e}")) from None

    def wait_for_news(self, seconds: float) -> None:
        """Between two looks of a gate: until a node says something, or SECONDS passed."""
        self._news += self.streams.wait(seconds)

    def refresh(self) -> None:
        """Take in what every node said since the last look; print milestones as they are
        reached; fail on a fatal line or a stopped container, or on the kernel's OOM kill
        behind it, on whichever node it was."""
        self._take_news()
        for node in list(self._lost):
            self._judge_lost(node)
        started = [n for n, w in self.watches.items() if w.started]
        if stopped := [n for n in started if self.watches[n].state != "running"]:
            for node in stopped:  # its last lines say why: read them before judging
                self.streams.finish_log(node, LOG_END_S)
            self._take_news()
        now = self.elapsed()
        troubled = {n: p for n in started if (p := watch_problems(self.watches[n], now, SETTLE_S))}
        if troubled:
            self.judge_oom()
            first = next(iter(troubled))
            self.fail({first: troubled[first]})

    def _judge_lost(self, node: str) -> None:
        """A stream of NODE ended before the launch closed it. A log ends when its container
        exits too: an inspection that finds it stopped leaves it to be judged as an exit (its
        exit code); a lost event stream, a container still running, or an engine that does
        not answer the inspection mean the engine's connection is lost: fail now."""
        lost = self._lost.pop(node)
        found = "; ".join(n.lost for n in lost)
        if all(n.lost_log for n in lost):
            try:
                container = self._container(node)
                container.reload()
            except NotFound:  # removed since: judged as gone
                self.watches[node].state = "missing"
                return
            except API_ERRORS as e:
                found += f"; its inspection failed too: {engine_said(e)}"
            else:
                apply_inspect(self.watches[node], container.attrs)
                if self.watches[node].state != "running":
                    return
        self.fail({node: [lost_problem(node, found)]})

    def judge_oom(self) -> None:
        """Fail when the kernel OOM-killed a process in a started container: the cause of a
        dead rank, or of a silent one."""
        started = [n for n, w in self.watches.items() if w.started]
        self._each(self._read_oom, started)
        if killed := {n: [oom_problem(self.watches[n])] for n in started
                      if self.watches[n].oom_kills}:  # fmt: skip
            self.fail(killed)

    def _read_oom(self, node: str) -> None:
        watch = self.watches[node]
        if watch.container_id:
            found = self.io(node, oom_command(watch.container_id), QUERY_S).stdout
            watch.oom_kills = parse_oom_kills(found) or watch.oom_kills

    def _take_news(self) -> None:
        news, self._news = [*self._news, *self.streams.drain()], []
        at = self.elapsed()
        for item in news:
            watch = self.watches[item.node]
            if item.lost:
                self._lost.setdefault(item.node, []).append(item)
                continue
            if item.line is None:
                apply_event(watch, item.event)
                continue
            line = self.hide(item.line)
            watch.lines.append(line)
            for name in scan(self.launch, watch, item.node, [line], at):
                self.say(f"[{at:6.1f} s] {self._where(item.node)}: {name}")
                self.heartbeat.said(at)

    def beat(self, gate: Gate) -> None:
        """While GATE waits, every HEARTBEAT_S: a line per node it waits on, with the node's
        last log line (already redacted), so a long weight load shows its progress."""
        at = self.elapsed()
        if not self.heartbeat.due(at):
            return
        for node in behind(gate, self.watches, self.head):
            said = last_said(self.watches[node].lines) or "nothing yet"
            self.say(f"[{at:6.1f} s] {self._where(node)}: waiting for {gate.name}; log: {said}")

    def fail(self, problems: dict[str, list[Problem]], at: str = "") -> NoReturn:
        """Stop the launch: PROBLEMS per node, at the gate AT, with every node's tail."""
        where = {n: self._where(n) for n in self.nodes}
        raise LaunchFailed(
            self.hide(
                failure_text(
                    self.launch, self.watches, where, problems, at, self.elapsed(), self.evidence
                )
            )
        )

    # -- after the launch

    def unreached(self) -> dict[str, list[Problem]]:
        """Per node, the milestones planned for it that its log never showed."""
        return unreached(self.launch, self.watches)

    def catch_up(self, node: str) -> NodeWatch:
        """The node's container state and log lines, with what the kernel OOM-killed in it."""
        self._take_news()
        self._read_oom(node)
        return self.watches[node]

    def processes(self, node: str) -> list[Process]:
        """The processes of NODE's engine container (none when it is not running)."""
        try:
            return parse_top(self._container(node).top(ps_args="-o pid,args"))
        except API_ERRORS:  # stopped or gone: rank_problems says so from its state
            return []

    def rank_problems(self, node: str) -> list[Problem]:
        """A rank is alive when its container runs and every process it had when the API
        became ready still runs: /health on the head stays 200 after a worker died."""
        watch = self.catch_up(node)
        if watch.oom_kills:
            return [oom_problem(watch)]
        if watch.state != "running":
            return [Problem(exited(watch), "the engine container running since the launch",
                            logs_remedy(watch))]  # fmt: skip
        now = {p.pid for p in self.processes(node)}
        gone = [p for p in self.ready_processes.get(node, []) if p.pid not in now]
        return [Problem(f"process {p.pid} gone since ready: {p.args[:120]}",
                        "every engine process of the rank alive",
                        "the rank is dead: redeploy, and read the evidence for why it died")
                for p in gone]  # fmt: skip

    def save_evidence(self) -> None:
        """Per node: the container's whole log and its inspection (the Engine API's, both
        redacted), the kernel's OOM lines (the node's shell)."""
        if self.evidence is None:
            return
        for node in self.watches:
            folder = private_dir(self.evidence / node)
            for name, read in (("container.log", self._log), ("inspect.json", self._inspect),
                               ("kernel-oom.txt", self._kernel_oom)):  # fmt: skip
                try:
                    write_private(folder / name, self.hide(read(node)))
                except Exception as e:  # an unreachable node must not hide the others' evidence
                    write_private(folder / name, self.hide(f"could not read: {e}\n"))

    def _container(self, node: str) -> Container:
        return self._engine(node).containers.get(self.watches[node].container)

    def _log(self, node: str) -> str:
        return bytes(self._container(node).logs()).decode(errors="replace")

    def _inspect(self, node: str) -> str:
        return json.dumps(self._container(node).attrs, indent=2) + "\n"

    def _kernel_oom(self, node: str) -> str:
        out = self.io(node, KERNEL_OOM, EVIDENCE_S)
        return out.stdout + out.stderr

    # -- teardown

    def stop(self) -> None:
        """Remove this run's containers, by its label, on every node at once (SIGTERM,
        then SIGKILL after the grace: vLLM's lone head ignores SIGTERM), through each node's
        Engine API; then prove it by a separate listing (removal.py)."""
        problems = {n: p for n, p in self._each(self._remove, list(self.nodes)).items() if p}
        if problems:
            raise LaunchFailed("\n".join(
                [f"the removal of run {self.launch.run_id} failed:"]
                + [describe_all(self._where(n), p) for n, p in problems.items()]))  # fmt: skip
        self.say(f"stopped run {self.launch.run_id} on {', '.join(self.nodes)}")

    def _remove(self, node: str) -> list[Problem]:
        return remove_run(lambda: self.engines[node], self.launch.run_id, self.inventory_path)[1]

    def stop_hint(self) -> str:
        return f"`{down_command(self.launch.run_id, self.inventory_path)}`, or on each " + (
            f"node `{node_remove_hint(self.launch.run_id)}`")  # fmt: skip

    def _each(self, work: Callable[[str], T], nodes: list[str]) -> dict[str, T]:
        """WORK for every node at once."""
        return dict(zip(nodes, self._pool.map(work, nodes), strict=True))

    def _where(self, node: str) -> str:
        return self.nodes[node].where


def hiding(io: NodeIo, hide: Callable[[str], str]) -> NodeIo:
    """The node I/O whose answers come back through HIDE."""

    def run(node: str, command: str, timeout_s: float, input: str | None = None) -> Ran:
        done = io(node, command, timeout_s, input)
        return Heard(done.exit_status, hide(done.stdout), hide(done.stderr))

    return run


def _start_remedy(said: str, node: Node, launch: Launch) -> str:
    if "Unable to find image" in said or "No such image" in said or "pull access" in said:
        load = shlex.join(node.ssh_argv("docker", "load"))
        return (
            f"load the image on the node: `docker save IMAGE | {load}` "
            "(`pytest -m preflight -k image`)"
        )
    if "Cannot connect to the Docker daemon" in said:
        return f"start Docker on {node.name}: `systemctl start docker`"
    return f"run the command on {node.name} by hand and read docker's error"
