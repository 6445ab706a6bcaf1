"""The ports the engine binds on every node, and those its ranks open after the rendezvous."""

import pytest

from infergate.checks.facts import firewall_of, listening_of, port_range_of
from infergate.checks.firewall import check_after_rendezvous, check_listened
from infergate.checks.node_ports import check_outside_ephemeral_range
from infergate.checks.ports import check_ports_free
from infergate.engines.registry import engine_for
from infergate.fixtures.facts import every_node, read_fact
from infergate.fixtures.report import fail_on, fail_on_nodes


# in the cluster group: read before the dist-init listener holds its port
@pytest.mark.xdist_group("cluster")
def test_engine_ports_free_on_every_node(probes, inventory, answered):
    """The ports the engine's ranks bind on each node (the head's API and rendezvous, a
    fixed VLLM_PORT, SGLang's health server, Ray's own) are free there."""
    seen, engine = every_node(probes, answered, listening_of), engine_for(inventory)
    problems = {
        n.name: check_ports_free(seen[n.name], engine.planned_ports(inventory, n)) for n in answered
    }
    fail_on_nodes(answered, problems)


def test_engine_ports_outside_ephemeral_range(probes, node, inventory):
    """No port the plan fixes lies in the node's ephemeral range unreserved, where any
    outgoing connection may take it first."""
    span = read_fact(node, probes.of(node), port_range_of)
    planned = engine_for(inventory).planned_ports(inventory, node)
    fail_on(node, check_outside_ephemeral_range(span, planned))


@pytest.mark.xdist_group("cluster")
def test_ports_after_rendezvous_reachable_between_nodes(after_rendezvous_dials, probes, inventory):
    """Every node reaches every peer over the fabric on a sample of the ports NCCL, Gloo, ZMQ and
    Ray listen on once dist-init has answered (the ephemeral range, Ray's worker ports), through
    temporary listeners removed afterwards; a port cut is named with the node's firewall rules."""
    subnet, dials = str(inventory.fabric.subnet), after_rendezvous_dials
    problems = {n.name: _cut_ports(dials[n.name], probes, n, subnet) for n in inventory.nodes}
    fail_on_nodes(inventory.nodes, problems)


def _cut_ports(sampled, probes, node, subnet):
    """NODE's listeners that did not open and its dials that did not connect, with its rules."""
    rules = read_fact(node, probes.of(node), firewall_of)
    address = str(node.fabric.address.ip)
    listened = check_listened(sampled.listener.ports, sampled.listener.refused)
    return listened + check_after_rendezvous(address, sampled.dials, rules, subnet)
