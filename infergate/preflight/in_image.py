"""The planned image, run once on every node at the same time: the engine's facts (cached on
each node for the next run), then the rendezvous all-reduce with the plan's own environment.
Each probe container is removed once it ended or its deadline passed, also after a failure or
Ctrl-C; nothing else is touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

from docker import DockerClient

from infergate.checks import facts as read
from infergate.checks.inimage import (
    body,
    cache_lookup_command,
    cache_write_command,
    facts_cache_section,
    parse_cache_lookup,
    probe_command,
)
from infergate.checks.inimage_ran import check_probe_ran, image_to_run, probe_blockers
from infergate.checks.probe import Section, parse_sections
from infergate.engines.container import ContainerSpec
from infergate.engines.labels import PROBE_LABEL
from infergate.engines.launch import ordered
from infergate.engines.registry import engine_for
from infergate.interrupts import sigint_deferred
from infergate.plan.apikey import flags_without_key
from infergate.plan.model import Inventory, Node
from infergate.preflight.per_node import PerNode
from infergate.problems import Problem
from infergate.remote.docker_api import (
    API_ERRORS,
    EngineUnreachable,
    Exited,
    engine_said,
    remove_labelled,
    run_to_exit,
)
from infergate.remote.docker_engines import Engines
from infergate.remote.fanout import on_every_node
from infergate.remote.ssh import NodeUnreachable, Outcome, Remote
from infergate.waiting import TIMEOUT_EXITS, Deadline

IMPORT_ALLOWANCE_S = 180  # importing an engine (torch, transformers) before the rendezvous
# what `docker run` exits with when the engine refused the container: the probe's rc then
DAEMON_REFUSED = 125


@dataclass(frozen=True)
class InImage:
    sections: dict[str, Section]
    said: str  # the container's stderr; the engine's words when it never ran the probe
    preamble: str = ""  # what the image printed before the probe: an NGC entrypoint's banner
    rc: int = 0  # the probe command's exit status
    # why the probe was not started on this node: the host checks' own problems
    blocked: tuple[Problem, ...] = ()

    @property
    def from_cache(self) -> bool:
        return body(self.sections.get("facts-cache")).get("hit") is True

    def part(self, name: str) -> dict[str, Any]:
        found = body(self.sections.get(name))
        if "error" in found and not self.sections and self.said:
            found["error"] = f"the probe container did not run: {self.said[-400:]}"
        return found


def _probe(
    inventory: Inventory, node: Node, rank: int
) -> tuple[ContainerSpec, list[str], dict[str, str]]:
    """NODE's engine container, the launch's own (Engine.container), the probe's arguments,
    and the rendezvous address and the sweep's largest size for its env. The planned flags
    without the API key: the probe parses them and serves nothing, and its argv is in `ps`."""
    engine, model = inventory.engine, inventory.model
    master = {"MASTER_ADDR": str(engine.dist_init_addr), "MASTER_PORT": str(engine.dist_init_port)}
    master["INFERGATE_SWEEP_MAX_BYTES"] = str(inventory.fabric.collective_max_mib * 2**20)
    deadline = inventory.thresholds.rendezvous_timeout_s
    adapter, world = engine_for(inventory), str(len(inventory.nodes))
    args = [adapter.probe.argument(), model.path, str(rank), world, f"{deadline:g}"]
    return adapter.container(inventory, node), [*args, *flags_without_key(engine.flags)], master


def _host_facts(
    probes: PerNode[read.Sections], inventory: Inventory
) -> tuple[Inventory, dict[str, list[Problem]]]:
    """From the host probe: the plan with the image ID to run (the plan's, else the head's),
    and per node why the probe cannot start there (no Docker engine, the image missing)."""
    engines, ids = {}, {}
    for name, sections in probes.every().items():
        if isinstance(sections, NodeUnreachable):
            continue  # the probe's own run says so
        engines[name] = read.docker_of(sections)
        try:
            ids[name] = read.image_id_of(sections)
        except read.ProbeError:  # the engine is down: check_docker_engine says it
            ids[name] = None
    image = replace(inventory.image, id=image_to_run(inventory, ids))
    return replace(inventory, image=image), probe_blockers(inventory, engines, ids)


Probes = Future[dict[str, Outcome[InImage]]]


@contextlib.contextmanager
def probing(
    remotes: dict[str, Remote],
    engines: Engines,
    inventory: Inventory,
    probes: PerNode[read.Sections],
    reuse: bool,
    label: str,
) -> Iterator[Probes]:
    """The probes, in the background while the caller waits or runs its tests. A run that
    ends first has its probe containers removed at once and as they come, a second
    interruption held meanwhile, silently (docs/notes.md#in-image-probe-teardown)."""
    with ThreadPoolExecutor(1, thread_name_prefix="in-image") as pool:
        started = pool.submit(_probe_every_node, remotes, engines, inventory, probes, reuse, label)
        try:
            yield started
        finally:
            with sigint_deferred(None):
                while not started.done():
                    on_every_node(remotes, lambda r: _remove_probes(engines, r.node, label))
                    wait([started], timeout=1.0)


def _probe_every_node(
    remotes: dict[str, Remote],
    engines: Engines,
    inventory: Inventory,
    probes: PerNode[read.Sections],
    reuse: bool,
    label: str,
) -> dict[str, Outcome[InImage]]:
    """Run the probe container on every node at once, except where the host probe shows it
    cannot start (no Docker engine, the image missing); a fresh read of the engine's facts is
    cached on its node for the next run."""
    inventory, blocked = _host_facts(probes, inventory)
    ranks = {n.name: rank for rank, n in enumerate(ordered(inventory))}

    def probe(remote: Remote) -> InImage:
        node = remote.node
        if blocked.get(node.name):
            return InImage({}, "", blocked=tuple(blocked[node.name]))
        try:
            client = engines.of(node)
        except EngineUnreachable as e:
            return InImage({}, str(e), rc=DAEMON_REFUSED)

        def shell(command: str) -> str:
            return str(remote.read(command, "the in-image facts cache").stdout)

        return probe_on_node(client, shell, inventory, node, ranks[node.name], label, reuse)

    return on_every_node(remotes, probe)


def probe_on_node(
    client: DockerClient,
    shell: Callable[[str], str],
    inventory: Inventory,
    node: Node,
    rank: int,
    label: str,
    reuse: bool,
) -> InImage:
    """The probe on NODE: its cache looked up by the node's SHELL (stdout of a command), its
    container run through the node's engine CLIENT, a fresh read of the engine's facts
    stored back by SHELL (a cache that cannot be written only costs the next run time)."""
    spec, args, master = _probe(inventory, node, rank)
    try:
        image_id = str(client.images.get(spec.image).id)
    except API_ERRORS as e:
        return InImage({}, engine_said(e), rc=DAEMON_REFUSED)
    key, hit, cached = parse_cache_lookup(shell(cache_lookup_command(spec, image_id, args, reuse)))
    command = probe_command(args, master, "cached" if hit else "fresh")
    exited = _run(client, spec, command, inventory, f"infergate-probe-{label}-{node.name}", label)
    stdout = exited.stdout + facts_cache_section(key, hit) + cached
    sections = parse_sections(stdout)
    store = cache_write_command(sections)
    if store:
        shell(store)
    before = stdout.split("\n@@@ ", 1)[0]
    return InImage(sections, exited.stderr.strip(), before, _rc(exited))


def _run(
    client: DockerClient,
    spec: ContainerSpec,
    command: list[str],
    inventory: Inventory,
    name: str,
    label: str,
) -> Exited:
    """The probe container run to its end (or its deadline), then removed; the engine's
    refusal (a mount, a runtime, a device it cannot give) as `docker run` would say it."""
    deadline = Deadline(
        inventory.thresholds.rendezvous_timeout_s + IMPORT_ALLOWANCE_S,
        "thresholds.rendezvous_timeout_s",
    )
    try:
        return run_to_exit(client, spec, command, deadline, name, {PROBE_LABEL: label})
    except API_ERRORS as e:
        return Exited(DAEMON_REFUSED, "", engine_said(e))


def _rc(exited: Exited) -> int:
    """The container's exit status; at its deadline, `timeout`'s (the wait's words are in
    its stderr)."""
    return TIMEOUT_EXITS[0] if exited.status is None else exited.status


def _remove_probes(engines: Engines, node: Node, label: str) -> list[str]:
    """This run's probe containers on NODE, removed (a Ctrl-C can leave one behind)."""
    try:
        return remove_labelled(engines.of(node), f"{PROBE_LABEL}={label}")
    except (EngineUnreachable, *API_ERRORS):  # its own probe says so
        return []


def skip_reason(node: Node, blocked: tuple[Problem, ...]) -> str:
    said = "; ".join(f"found {p.found}; planned {p.planned}; fix: {p.remedy}" for p in blocked)
    return f"{node.where}: the planned image cannot run there, so no in-image check: {said}"


def ran_problems(facts: InImage, inventory: Inventory) -> list[Problem]:
    image = inventory.image.id or inventory.image.ref
    return check_probe_ran(facts.sections, facts.rc, facts.said, image)
