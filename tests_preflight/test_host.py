"""Each node answers over SSH, tells who it is, and runs a Docker engine."""

import pytest

from infergate.checks.facts import identity_of
from infergate.checks.host import check_docker_engine, check_identity
from infergate.checks.tools import check_node_tools, needed_missing
from infergate.fixtures.facts import read_fact
from infergate.fixtures.report import fail_on
from infergate.preflight.roots import unreachable
from infergate.remote.ssh import NodeUnreachable


@pytest.mark.peers
def test_ssh_reachable_facts_gathered(node, inventory, probes):
    """I can reach every node over SSH and read its hostname, kernel and OS; no two nodes
    share a hostname."""
    seen = probes.every()
    if isinstance(seen[node.name], NodeUnreachable):
        fail_on(node, [unreachable(node, seen[node.name]).problem()])
    identity = read_fact(node, seen[node.name], identity_of)
    others = {
        peer.name: read_fact(peer, seen[peer.name], identity_of).hostname
        for peer in inventory.peers(node)
        if not isinstance(seen[peer.name], Exception)
    }
    fail_on(node, check_identity(identity.hostname, identity.kernel, others))


def test_node_tools_present(node_tools, node):
    """Every command the suite runs on a node is there; the packages that lack are named."""
    missing = needed_missing(node_tools.missing, node.gpus)
    fail_on(node, check_node_tools(missing, node_tools.os_release))


def test_docker_engine_answers(docker_engine, node):
    """Every node runs a Docker engine that answers (not just a CLI)."""
    fail_on(node, check_docker_engine(docker_engine))
