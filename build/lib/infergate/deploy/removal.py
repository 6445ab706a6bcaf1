"""A run's containers removed through a node's Docker Engine API by the suite's labels, and
proven by a separate listing after it; the deploy handle and `infergate down` both use it.

Only what carries one of the labels is ever listed, so nothing the suite did not start is
touched; runs.check_removed judges what happened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import requests
from docker import DockerClient
from docker.errors import NotFound

from infergate.checks.containers import Container, down_command
from infergate.deploy.failure import LaunchFailed
from infergate.deploy.runs import (
    LABELS,
    STOP_GRACE_S,
    Exit,
    RunContainer,
    check_removed,
    node_remove_hint,
    of_runs,
)
from infergate.deploy.state import LaunchState
from infergate.problems import Problem, describe_all
from infergate.remote.docker_api import API_ERRORS, EngineUnreachable, stop_and_remove
from infergate.remote.fanout import each
from infergate.waiting import TIMEOUT_EXITS

FAILURES = (EngineUnreachable, *API_ERRORS)


def run_containers(client: DockerClient, run_id: str | None) -> list[RunContainer]:
    """The containers of RUN_ID (of every run when None) on the node, each once; an empty
    or blank RUN_ID is refused, never read as every run."""
    if run_id is not None and not run_id.strip():
        raise ValueError(f"run id {run_id!r}: give a run's id, or None for every run")
    found = []
    for label in LABELS:
        value = label if run_id is None else f"{label}={run_id}"
        for c in client.containers.list(all=True, filters={"label": value}):
            image = str(c.attrs.get("Config", {}).get("Image", ""))
            found.append(Container(str(c.name), image, dict(c.labels), str(c.status)))
    return of_runs(found)


def taken_names(client: DockerClient, run_id: str, names: list[str]) -> list[str]:
    """The containers on the node named one of NAMES or carrying RUN_ID's labels: a launch
    whose names or label are taken must not start (its teardown would remove them)."""
    named = client.containers.list(all=True, filters={"name": [f"^/{n}$" for n in names]})
    return [str(c.name) for c in named] + [c.name for c in run_containers(client, run_id)]


def remove_run(
    engine: Callable[[], DockerClient],
    run_id: str | None,
    inventory_path: str | None,
    spare: str | None = None,
) -> tuple[list[RunContainer], list[Problem]]:
    """Remove the containers of RUN_ID (every run's but SPARE's when RUN_ID is None) on the
    node whose client ENGINE gives: what was there, and the problems of the removal (none
    when a separate listing after it shows none of them)."""
    try:
        client = engine()
        found = [c for c in run_containers(client, run_id) if c.run_id != spare]
    except FAILURES as e:
        return [], check_removed(run_id, failed(e), failed(e), [], inventory_path)
    removal: Exit = (0, "")
    for c in found:
        try:
            with contextlib.suppress(NotFound):  # gone by itself meanwhile: what was asked
                stop_and_remove(client.containers.get(c.name), STOP_GRACE_S)
        except FAILURES as e:
            removal = failed(e)
    try:
        left = [c.name for c in run_containers(client, run_id) if c.run_id != spare]
        listing: Exit = (0, "")
    except FAILURES as e:
        left, listing = [], failed(e)
    return found, check_removed(run_id, removal, listing, left, inventory_path)


def failed(error: Exception) -> Exit:
    """An Engine API call's failure as runs.check_removed reads a command's: its deadline
    (124), an engine not answering, not reached (its own words name why), or refusing."""
    if isinstance(error, requests.Timeout):
        return TIMEOUT_EXITS[0], f"no answer from the Docker engine: {error}"
    if isinstance(error, requests.ConnectionError):
        return 1, f"Cannot connect to the Docker daemon: {error}"
    return 1, str(getattr(error, "explanation", None) or error).splitlines()[0]


def remove_launch(s: LaunchState, inventory_path: str | None) -> None:
    """Remove the launch's run by its label on every node at once (SIGKILL after the grace:
    vLLM's lone head ignores SIGTERM), proven by a separate listing; fail naming each node
    where it was not (INVENTORY_PATH: for the remedy)."""
    run_id = s.launch.run_id

    def remove(node: str) -> list[Problem]:
        return remove_run(lambda: s.engines[node], run_id, inventory_path)[1]

    if problems := {n: p for n, p in each(list(s.nodes), remove).items() if p}:
        text = [f"the removal of run {run_id} failed:"]
        text += [describe_all(s.where(n), p) for n, p in problems.items()]
        raise LaunchFailed("\n".join(text))
    s.say(f"stopped run {run_id} on {', '.join(s.nodes)}")


def stop_hint(run_id: str, inventory_path: str | None) -> str:
    """How an operator removes a kept run: `infergate down`, or docker on each node."""
    return f"`{down_command(run_id, inventory_path)}`, or on each node `{node_remove_hint(run_id)}`"
