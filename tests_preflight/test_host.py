"""Each node answers over SSH, tells who it is, and runs a Docker engine."""

from infergate.checks.facts import identity_of
from infergate.checks.host import check_docker_engine, check_identity
from infergate.fixtures.facts import read_fact
from infergate.fixtures.report import fail_on


def test_ssh_reachable_facts_gathered(identity, node, inventory, probes):
    """I can reach every node over SSH and read its hostname, kernel and OS; no two nodes
    share a hostname."""
    seen = probes.every()
    others = {
        peer.name: read_fact(peer, seen[peer.name], identity_of).hostname
        for peer in inventory.peers(node)
        if not isinstance(seen[peer.name], Exception)
    }
    fail_on(node, check_identity(identity.hostname, identity.kernel, others))


def test_docker_engine_answers(docker_engine, node):
    """Every node runs a Docker engine that answers (not just a CLI)."""
    fail_on(node, check_docker_engine(docker_engine))
