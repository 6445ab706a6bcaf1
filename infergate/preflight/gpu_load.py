"""The full tier's GPU load, on every node at once: the kernel log read, the planned image's
container running scripts/gpu_load.py on every GPU for thresholds.gpu_load_s, the kernel log
read again, then `dcgmi diag` where the node has it and the plan asks for it. The container is
removed once it ended or its deadline passed, also on a failure or Ctrl-C (docs/checks.md#gpu-load).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from infergate.checks import facts as read
from infergate.checks.dcgm import DIAG_TIMEOUT_S, dcgm_command
from infergate.checks.gpu_load import (
    SCRIPT_ALLOWANCE_S,
    GpuLoad,
    check_gpu_load,
    check_load_xids,
    load_command,
    parse_gpu_load,
)
from infergate.checks.kernel_log import KERNEL_LOG, KernelLog, parse_kernel_log
from infergate.checks.probe import Section, parse_sections
from infergate.engines.labels import PROBE_LABEL
from infergate.engines.registry import engine_for
from infergate.plan.model import Inventory, Node
from infergate.preflight.in_image import _host_facts, _remove_probes
from infergate.preflight.per_node import PerNode
from infergate.problems import Problem
from infergate.remote.docker_api import API_ERRORS, EngineUnreachable, engine_said, run_to_exit
from infergate.remote.docker_engines import Engines
from infergate.remote.fanout import on_every_node
from infergate.remote.ssh import Outcome, Remote
from infergate.waiting import Deadline


@dataclass(frozen=True)
class LoadRun:
    """One node's load: the script's report (None where the container could not run: `said`
    says why, `blocked` where the host checks already did), the kernel log before and after,
    and the `dcgmi` section (None where the plan turns it off)."""

    load: GpuLoad | None
    said: str
    before: KernelLog
    after: KernelLog
    dcgm: Section | None
    blocked: tuple[Problem, ...] = ()


def load_every_node(
    remotes: dict[str, Remote],
    engines: Engines,
    inventory: Inventory,
    probes: PerNode[read.Sections],
    label: str,
) -> dict[str, Outcome[LoadRun]]:
    """The load on every node at once, its containers labelled LABEL and removed at the end."""
    planned, blocked = _host_facts(probes, inventory)

    def run(remote: Remote) -> LoadRun:
        return load_on_node(
            remote, engines, planned, label, tuple(blocked.get(remote.node.name, ()))
        )

    with _removed(remotes, engines, label):
        return on_every_node(remotes, run)


@contextlib.contextmanager
def _removed(remotes: dict[str, Remote], engines: Engines, label: str) -> Iterator[None]:
    try:
        yield
    finally:
        on_every_node(remotes, lambda r: _remove_probes(engines, r.node, label))


def load_on_node(
    remote: Remote, engines: Engines, inventory: Inventory, label: str, blocked: tuple[Problem, ...]
) -> LoadRun:
    """NODE's kernel log, its load (unless BLOCKED), its kernel log again, then dcgmi."""
    before = _kernel_log(remote)
    load, said = (None, "") if blocked else _load(engines, inventory, remote.node, label)
    after = _kernel_log(remote)
    level = int(inventory.thresholds.dcgm_diag_level)
    dcgm = _dcgm(remote, level) if level else None
    return LoadRun(load, said, before, after, dcgm, blocked)


def load_problems(run: LoadRun) -> list[Problem]:
    """The load's container ran its script, whose report and the kernel log then judge."""
    if run.load is None:
        return [
            Problem(
                found=f"the GPU load's container did not run: {run.said[:400]}",
                planned="the planned image's container running the GPU load to its end",
                remedy="what the Docker engine or the container said; the load's container is "
                "the launch's own, so the launch would meet the same",
            )
        ]
    return check_gpu_load(run.load) + check_load_xids(run.before, run.after)


def _kernel_log(remote: Remote) -> KernelLog:
    return parse_kernel_log(remote.read(KERNEL_LOG, "the kernel log around the GPU load").stdout)


def _load(
    engines: Engines, inventory: Inventory, node: Node, label: str
) -> tuple[GpuLoad | None, str]:
    """The load container run to its end: the script's report, or what stopped it."""
    seconds = inventory.thresholds.gpu_load_s
    spec = engine_for(inventory).container(inventory, node)
    deadline = Deadline(seconds + SCRIPT_ALLOWANCE_S, "thresholds.gpu_load_s")
    name = f"infergate-gpu-load-{label}-{node.name}"
    try:
        client = engines.of(node)
        exited = run_to_exit(
            client, spec, load_command(seconds), deadline, name, {PROBE_LABEL: label}
        )
    except EngineUnreachable as e:
        return None, str(e)
    except API_ERRORS as e:
        return None, engine_said(e)
    sections = parse_sections(exited.stdout)
    if "gpu-load" not in sections or "gpu-samples" not in sections:
        status = "its deadline passed" if exited.status is None else f"exit {exited.status}"
        return None, f"the load container printed no report ({status}): {exited.stderr[-400:]}"
    samples = sections["gpu-samples"]
    return parse_gpu_load(sections["gpu-load"].text, samples.text, samples.rc), ""


def _dcgm(remote: Remote, level: int) -> Section:
    limit = Deadline(DIAG_TIMEOUT_S[level] + 10, "thresholds.dcgm_diag_level")
    ran = remote.read(dcgm_command(level), "dcgmi diag", limit)
    return parse_sections(ran.stdout).get("dcgmi", Section(rc=ran.exit_status, text=ran.stderr))
