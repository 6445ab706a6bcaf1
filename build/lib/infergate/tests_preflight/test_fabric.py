"""The fabric: the planned interface and address on every node, one MTU, peers reachable."""

import pytest

from infergate.checks.facts import interfaces_of, rdma_ports_of
from infergate.checks.network import check_fabric_interface, check_mtu_parity, check_peers_reachable
from infergate.checks.ports import check_dial, check_listener
from infergate.checks.rdma import check_rdma
from infergate.checks.rdma_sysfs import rdma_plan
from infergate.fixtures.facts import every_node, read_fact, settled
from infergate.fixtures.report import fail_on, fail_on_nodes


def test_fabric_interface_up_with_planned_address(interfaces, node):
    """Every node's fabric interface exists, is up with carrier, and holds its planned address."""
    planned = node.fabric
    key = node.key_of("fabric.interface")
    fail_on(node, check_fabric_interface(interfaces, planned.interface, planned.address, key))


def test_fabric_peers_answer_ping(peer_pings, node):
    """From every node, every peer answers ICMP on its fabric address over the fabric interface."""
    fail_on(node, check_peers_reachable(node.fabric.interface, peer_pings))


def test_rdma_ports_active_with_roce_v2_gid(probes, node, inventory):
    """Every HCA the node's plan names is ACTIVE and LinkUp, the HCA of the fabric interface
    holds a RoCE v2 GID of the node's fabric address (at NCCL_IB_GID_INDEX, if that is set),
    and on a Spark both twin HCAs of the port are planned."""
    plan = rdma_plan(node, inventory.node_env(node))
    if not plan.names_hcas:
        pytest.skip(
            f"the plan names no HCA for this node: {plan.hcas_key} and NCCL_IB_HCA are empty"
        )
    ports = read_fact(node, probes.of(node), rdma_ports_of)
    fail_on(node, check_rdma(ports, plan))


@pytest.mark.xdist_group("cluster")
def test_fabric_mtu_equal_on_every_node(probes, inventory, answered):
    """The fabric MTU is the same on every node (and the planned one), so large transfers pass.
    A node without its fabric interface is the interface test's finding, not this one's."""
    mtus, interfaces = _fabric_mtus(probes, answered)
    fail_on_nodes(answered, check_mtu_parity(mtus, inventory.fabric.mtu, interfaces))


def _fabric_mtus(probes, nodes):
    """Each node's fabric MTU (where the node has that interface), and the interface."""
    seen = every_node(probes, nodes, interfaces_of)
    interfaces = {n.name: n.fabric.interface for n in nodes}
    mtus = {name: seen[name][i].mtu for name, i in interfaces.items() if i in seen[name]}
    return mtus, interfaces


@pytest.mark.xdist_group("cluster")
def test_dist_init_port_reachable_from_every_node(dist_init_dials, inventory):
    """Every node opens TCP to the head's dist-init port over the fabric (the engines'
    rendezvous), through a temporary listener that is removed afterwards."""
    listener, dials = dist_init_dials
    port, address = inventory.engine.dist_init_port, str(inventory.engine.dist_init_addr)
    fail_on(inventory.head, check_listener(listener, port))
    problems = {name: check_dial(settled(text), address, port) for name, text in dials.items()}
    fail_on_nodes(inventory.nodes, problems)
