"""The host probe: one SSH round trip per node, a shell script that prints every host fact
in named sections (checks/probe.py), parsed into Sections for the checks' readers."""

from __future__ import annotations

from collections.abc import Callable

from infergate.checks import facts as read
from infergate.checks.disk_space import node_sections
from infergate.checks.probe import (
    check_probe_printed,
    parse_sections,
    plan_sections,
    probe_script,
    running_when_ended,
)
from infergate.plan.model import Inventory
from infergate.remote.ssh import NodeTimedOut, NodeUnreachable, Remote
from infergate.waiting import TIMEOUT_EXITS


class ProbeSilent(NodeUnreachable):
    """The node answered, but its probe printed no section: nothing can be read from it."""


def host_probe(inventory: Inventory) -> Callable[[Remote], read.Sections]:
    """The probe of a node: the plan's sections, then the node's own (its disk, its hub)."""
    planned = plan_sections(inventory.image.ref, inventory.model.path)
    return lambda r: probe_node(r, (*planned, *node_sections(inventory, r.node)))


def probe_node(remote: Remote, planned: tuple[tuple[str, str], ...]) -> read.Sections:
    """The probe's sections; a probe that ran past its deadline names the section it was in."""
    done = remote.run(probe_script(planned))
    sections = parse_sections(done.stdout)
    if done.exit_status in TIMEOUT_EXITS:
        look = running_when_ended(planned, sections)
        raise NodeTimedOut(
            remote.node.where, "the host probe", remote.limit, done.exit_status, look
        )
    problem = check_probe_printed(sections, done.exit_status, done.stderr)
    if problem:
        raise ProbeSilent(f"{remote.node.where}: {problem.describe()}")
    return sections
