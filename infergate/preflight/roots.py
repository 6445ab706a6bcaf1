"""The roots a node's checks depend on, in order: SSH reaches it, its host facts are read, the
tools the suite runs are there, its Docker engine answers, the image is present, the probe
container runs, the rendezvous completes. The first one that failed on a node is the cause of
every check there that needs it: that check is skipped, naming it (docs/suite.md#roots).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infergate.catalogue import CHECKS, NODE_ROOTS, root_check
from infergate.checks import facts as read
from infergate.checks.host import check_docker_engine
from infergate.checks.inimage import check_all_reduce
from infergate.checks.tools import missing_tools, needed_missing
from infergate.plan.model import Inventory, Node
from infergate.preflight.host import ProbeSilent
from infergate.preflight.in_image import InImage, ran_problems
from infergate.preflight.per_node import PerNode
from infergate.problems import Problem
from infergate.remote.ssh import (
    NodeCommandFailed,
    NodeHung,
    NodeTimedOut,
    NodeUnreachable,
    Outcome,
)

# the roots a check of one node reports for that node; the others are judged across nodes
PER_NODE = frozenset({"ssh", "facts", "tools", "docker", "in-image"})
FIX = "\n    fix: "
# what each root plans, as a failure's `planned`
PLANNED = {
    "ssh": "reachable over SSH from this controller",
    "facts": "the host probe read",
    "tools": "every command the suite runs on a node",
    "docker": "a running Docker engine",
    "image": "the planned image on the node",
    "in-image": "the probe container runs to its end",
    "rendezvous": "an all-reduce across every node",
    "endpoint": "the endpoint answers one request",
    "prompts": "the load's prompts, from the served model's tokenizer or inference.dataset",
}


@dataclass(frozen=True)
class Blocked:
    """A root that failed: its CODE, WHERE (a node's name and address, or an endpoint), what
    was SAID in a line, the REMEDY, and the check that reports it."""

    root: str
    code: str
    where: str
    said: str
    remedy: str
    reporter: str
    short: str = ""  # SAID's first clause, for the skips that name it

    def reason(self) -> str:
        return f"not checked: {self.where} {self.short or self.said} ({self.reporter})"

    def problem(self) -> Problem:
        """As a failure says it: "found unreachable over SSH: ...; planned ..."."""
        return Problem(self.said.removeprefix("is "), PLANNED[self.root], self.remedy, self.code)


def reporter(root: str, node: Node | None) -> str:
    """The id of ROOT's check for NODE: `test_x[node1]`, or `test_x` across nodes."""
    check = root_check(root)
    return f"{check}[{node.name}]" if node is not None and root in PER_NODE else check


def split_fix(text: str) -> tuple[str, str]:
    """A message's cause and its `fix:` line."""
    said, _, fix = text.partition(FIX)
    return said.strip(), fix.strip()


def unreachable(node: Node, error: NodeUnreachable) -> Blocked:
    """ssh could not reach NODE, or hung, or the host probe itself failed there."""
    said, fix = split_fix(str(error))
    said = said.removeprefix(node.where).strip()
    if isinstance(error, (NodeCommandFailed, NodeTimedOut, ProbeSilent)):
        root, code = "facts", "IG-HOST-FACTS-UNREADABLE"
    else:
        root, code = "ssh", "IG-SSH-HUNG" if isinstance(error, NodeHung) else "IG-SSH-UNREACHABLE"
    short = said.partition(":")[0]
    return Blocked(root, code, node.where, said, fix, reporter(root, node), short)


class Roots:
    """Each node's roots, judged on first use from the facts the checks read anyway."""

    def __init__(self, inventory: Inventory, probes: PerNode[read.Sections]) -> None:
        self.inventory, self.probes = inventory, probes
        self._short_of_rendezvous: frozenset[str] | None = None  # judged once, on first use

    def blocking(
        self,
        node: Node,
        needs: str,
        tools: tuple[str, ...],
        own: str,
        in_image: Callable[[], dict[str, Outcome[InImage]]],
    ) -> Blocked | None:
        """The first root up to NEEDS that failed on NODE; a check that reports root OWN
        looks only at the roots before it. TOOLS: the node commands it needs; IN_IMAGE: the
        probe containers' outcomes, made when a root asks for them."""
        own_at = NODE_ROOTS.index(own) if own in NODE_ROOTS else -1
        chain = NODE_ROOTS[: own_at if own_at >= 0 else NODE_ROOTS.index(needs) + 1]
        if "docker" in chain:
            tools = (*tools, "docker")
        for root in chain:
            found = self._judge(root, node, tools, in_image)
            if found is not None:
                return found
        return None

    def _judge(
        self,
        root: str,
        node: Node,
        tools: tuple[str, ...],
        in_image: Callable[[], dict[str, Outcome[InImage]]],
    ) -> Blocked | None:
        outcome = self.probes.of(node)
        if isinstance(outcome, NodeUnreachable):
            return unreachable(node, outcome) if root in ("ssh", "facts") else None
        if root == "tools":
            return self._tools(node, outcome, tools)
        if root == "docker":
            problems = check_docker_engine(read.docker_of(outcome))
            if not problems:
                return None
            down = problems[0]
            said, short = down.found, "has no Docker engine that answers"
            return Blocked(
                root, "IG-DOCKER-DOWN", node.where, said, down.remedy, reporter(root, node), short
            )
        if root == "image":
            return self._image(node, outcome)
        if root == "rendezvous" and self._peer_blocked(node, in_image):
            return None  # the peer's own root stopped the rendezvous, and names it
        if root in ("in-image", "rendezvous"):
            return self._in_image(root, in_image()[node.name], node)
        return None

    def _peer_blocked(
        self, node: Node, in_image: Callable[[], dict[str, Outcome[InImage]]]
    ) -> bool:
        """Whether a root before the rendezvous failed on another node; the nodes where one
        did are judged once a run, not once per node of every check that needs them."""
        if self._short_of_rendezvous is None:
            nodes = self.inventory.nodes
            short = (n.name for n in nodes if self.blocking(n, "in-image", (), "", in_image))
            self._short_of_rendezvous = frozenset(short)
        return bool(self._short_of_rendezvous - {node.name})

    def _tools(self, node: Node, sections: read.Sections, tools: tuple[str, ...]) -> Blocked | None:
        lacking = needed_missing(missing_tools(sections), node.gpus)
        missing = [t.name for t in lacking if t.name in tools]
        if not missing:
            return None
        said = f"lacks {', '.join(missing)}"
        fix = CHECKS[root_check("tools")].remedy
        return Blocked(
            "tools", "IG-NODE-TOOLS-MISSING", node.where, said, fix, reporter("tools", node)
        )

    def _image(self, node: Node, sections: read.Sections) -> Blocked | None:
        try:
            found = read.image_id_of(sections)
        except read.ProbeError:
            return None  # the engine's own failure: the docker root says it
        if found is not None:
            return None
        ref = self.inventory.image.ref
        fix = CHECKS[root_check("image")].remedy
        return Blocked(
            "image",
            "IG-IMAGE-MISSING",
            node.where,
            f"lacks the image {ref}",
            fix,
            reporter("image", node),
        )

    def _in_image(self, root: str, outcome: Outcome[InImage], node: Node) -> Blocked | None:
        if isinstance(outcome, NodeUnreachable):
            return unreachable(node, outcome)
        if root == "in-image":
            problems = list(outcome.blocked) or ran_problems(outcome, self.inventory)
            if not problems:
                return None
            said = f"could not run the probe container: {problems[0].found}"
            return Blocked(
                root,
                "IG-PROBE-CONTAINER-FAILED",
                node.where,
                said,
                problems[0].remedy,
                reporter(root, node),
            )
        world = len(self.inventory.nodes)
        deadline = self.inventory.thresholds.rendezvous_timeout_s
        failed = check_all_reduce(outcome.part("rendezvous"), world, deadline)
        if not failed:
            return None
        return Blocked(
            root,
            "IG-RENDEZVOUS-FAILED",
            node.where,
            "failed the rendezvous",
            failed[0].remedy,
            reporter(root, node),
        )
