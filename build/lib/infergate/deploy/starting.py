"""This run's containers started through each node's Docker Engine API, and followed.

A launch whose run id or container names are already on a node is refused before it starts
anything (docs/deploy-and-inference.md#run-labels). The engine's refusal ends the launch at
once, in its own words.
"""

from __future__ import annotations

import shlex
from typing import NoReturn

from docker.models.containers import Container

from infergate.deploy.failure import LaunchFailed
from infergate.deploy.removal import taken_names
from infergate.deploy.runs import check_run_not_taken
from infergate.deploy.state import LaunchState
from infergate.deploy.watch import apply_inspect
from infergate.engines.labels import RUN_LABEL
from infergate.engines.launch import Exec, Start
from infergate.plan.model import Node
from infergate.problems import Problem, describe_all
from infergate.remote.docker_api import API_ERRORS, EngineUnreachable, create_container, engine_said
from infergate.remote.fanout import each


def refuse_taken(s: LaunchState) -> None:
    """Refuse to start when a container with one of this run's names or its label is
    already on a node: this run's teardown removes by label, so it would remove them."""
    found = each(list(s.nodes), lambda node: taken(s, node))
    if problems := {n: p for n, p in found.items() if p}:
        heading = f"launch of {s.launch.engine} (run {s.launch.run_id}) refused, "
        text = [heading + "nothing started:"]
        text += [describe_all(s.where(n), p) for n, p in problems.items()]
        raise LaunchFailed(s.hide("\n".join(text)))


def taken(s: LaunchState, node: str) -> list[Problem]:
    """What on NODE already has this run's names or label; a listing that fails, named."""
    names = list(s.launch.containers.values())
    try:
        found = taken_names(s.engines[node], s.launch.run_id, names)
    except (EngineUnreachable, *API_ERRORS) as e:
        said = engine_said(e).splitlines()[0]
        remedy = start_remedy(said, s.nodes[node])
        failed = f"listing its containers failed: {said}"
        return [Problem(failed, "Docker answering before the launch", remedy)]
    return check_run_not_taken(s.launch.run_id, found)


def follow_events(s: LaunchState) -> None:
    """Follow each node's events about this run's containers, from now on."""
    label = f"{RUN_LABEL}={s.launch.run_id}"
    for node in s.launch.containers:
        s.streams.follow_events(node, s.engine(node), label)


def start(s: LaunchState, step: Start | Exec) -> None:
    """Create and start STEP's container, or its process in one, through the node's
    Engine API; the engine's refusal fails the launch at once, with its words."""
    engine = s.engine(step.node)
    try:
        if isinstance(step, Start):
            labels = dict(step.labels)
            container = create_container(engine, step.spec, step.command, step.container, labels)
            container.start()
        else:
            engine.containers.get(step.container).exec_run(step.detached(), detach=True)
    except API_ERRORS as e:  # the engine's refusal, or its connection lost
        refused(s, step, s.hide(engine_said(e)))
    s.watches[step.node].started = True
    if isinstance(step, Start):
        follow(s, step.node, container)
    verb = "started" if isinstance(step, Start) else "launched in"
    s.say(f"[{s.elapsed():6.1f} s] {s.where(step.node)}: {verb} {step.container}")


def refused(s: LaunchState, step: Start | Exec, said: str) -> NoReturn:
    """Fail the launch: the engine refused STEP, and SAID so."""
    verb = "creating and starting" if isinstance(step, Start) else "the exec in"
    found = f"{verb} {step.container} failed: {said}"
    planned = f"the engine container {step.container} started"
    remedy = start_remedy(said, s.nodes[step.node])
    s.fail({step.node: [Problem(found, planned, remedy)]})


def follow(s: LaunchState, node: str, container: Container) -> None:
    """Follow the container just started: its state now, its log from its first line."""
    container.reload()
    apply_inspect(s.watches[node], container.attrs)
    s.streams.follow_log(node, container)


def start_remedy(said: str, node: Node) -> str:
    """What to do when Docker refused to start (or list) on NODE, from what it SAID."""
    if "Unable to find image" in said or "No such image" in said or "pull access" in said:
        load = shlex.join(node.ssh_argv("docker", "load"))
        return (
            f"load the image on the node: `docker save IMAGE | {load}` "
            "(`pytest -m preflight -k image`)"
        )
    if "Cannot connect to the Docker daemon" in said:
        return f"start Docker on {node.name}: `systemctl start docker`"
    return f"run the command on {node.name} by hand and read docker's error"
