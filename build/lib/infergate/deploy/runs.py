"""This suite's runs on the nodes: the containers each run left, judged by their labels.

The label is the record (docs/deploy-and-inference.md#run-labels): what a run leaves behind
is exactly what carries its id. Pure: removal.py lists and removes through each node's
Engine API, and the judges of what it found are here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from infergate.checks.containers import Container, down_command
from infergate.engines.labels import PLAN_LABEL, PROBE_LABEL, RUN_LABEL
from infergate.problems import Problem
from infergate.waiting import TIMEOUT_EXITS

# every container of this suite carries one of them
LABELS = (RUN_LABEL, PROBE_LABEL)
# a run's id (fixtures/runs.py:new_run_id): its UTC start, then 64 random bits in hex
RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{16}")
# SIGTERM first (a SIGKILLed vLLM leaks its shared memory), then SIGKILL
STOP_GRACE_S = 5


@dataclass(frozen=True)
class RunContainer:
    """A container of one of this suite's runs."""

    name: str
    run_id: str
    plan: str
    status: str
    image: str


def of_runs(containers: list[Container]) -> list[RunContainer]:
    """The containers that carry a run's label, each once."""
    found: dict[str, RunContainer] = {}
    for c in containers:
        run = c.labels.get(RUN_LABEL) or c.labels.get(PROBE_LABEL)
        if run:
            plan = c.labels.get(PLAN_LABEL) or (
                "(preflight probe)" if PROBE_LABEL in c.labels else "?"
            )
            found[c.name] = RunContainer(c.name, run, plan, c.status, c.image)
    return list(found.values())


def check_run_not_taken(run_id: str, names: list[str]) -> list[Problem]:
    """No container on the node carries this run's id, as a label or in its name, before the
    launch starts (NAMES: removal.taken_names): the run's teardown removes by label, and
    would remove what is not its own."""
    taken = sorted(set(names))
    if not taken:
        return []
    inspect = shlex.join(["docker", "inspect", taken[0]])
    found = (
        f"container(s) {', '.join(taken)} already there with this run's name or label "
        f"(run {run_id})"
    )
    remedy = (
        f"a container already carries this run's id (another launch with the same id, or one "
        f"named after it): find what it is (`{inspect}`) and remove it if it is a leftover, "
        "or start the run again for a new id"
    )
    return [Problem(found, "no container of this run before it starts", remedy)]


# a command's exit status and the last line of its stderr
Exit = tuple[int, str]


def check_removed(
    run_id: str | None, removal: Exit, listing: Exit, left: list[str], inventory_path: str | None
) -> list[Problem]:
    """The removal of a run (every run's when RUN_ID is None) on one node, judged by its exit
    status and by a separate listing after it: `timeout` exits 124 and a killed ssh 255, and
    neither removed anything."""
    which = "every run" if run_id is None else f"run {run_id}"
    problems = []
    if removal[0] != 0:
        late = " (its deadline passed)" if removal[0] in TIMEOUT_EXITS else ""
        found = f"the removal of {which} exited {removal[0]}{late}{_said(removal)}"
        remedy = removal_remedy(run_id, inventory_path, removal)
        problems.append(Problem(found, "the removal exits 0", remedy))
    if listing[0] != 0:
        found = (
            f"the listing after the removal exited {listing[0]}{_said(listing)}: what is left "
            "is unknown"
        )
        remedy = removal_remedy(run_id, inventory_path, listing)
        problems.append(Problem(found, "a listing that shows none of its containers", remedy))
    elif left:
        remedy = removal_remedy(run_id, inventory_path, removal)
        found = f"container(s) of {which} still there after the removal: {', '.join(left)}"
        problems.append(Problem(found, "none of its containers left", remedy))
    return problems


def _said(done: Exit) -> str:
    return f": {done[1][:300]}" if done[1] else ""


def _cause(done: Exit) -> str:
    status, said = done
    if status in TIMEOUT_EXITS:
        return "the removal ran past its deadline on the node (Docker slow or stuck)"
    if status == 255:
        return f"SSH to the node failed during the removal ({said or 'no message'})"
    if "Cannot connect to the Docker daemon" in said:
        return "Docker is not answering on the node: start it (`systemctl start docker`)"
    if status:
        return f"Docker on the node failed ({said or f'exit {status}'})"
    return "Docker left them (a container that will not stop)"


def node_remove_hint(run_id: str | None) -> str:
    """What an operator pastes on a node to remove a run's containers (every run's when
    None): one line per label."""
    lines = []
    for label in LABELS:
        value = label if run_id is None else f"{label}={run_id}"
        listing = shlex.join(["docker", "ps", "-aq", "--filter", f"label={value}"])
        lines.append(f"{listing} | xargs -r docker rm -f")
    return "; ".join(lines)


def removal_remedy(run_id: str | None, inventory_path: str | None, done: Exit) -> str:
    """Lead with the cause, then the command that finishes the removal."""
    down = down_command(run_id, inventory_path)
    return f"{_cause(done)}; then run `{down}`, or on the node `{node_remove_hint(run_id)}`"
