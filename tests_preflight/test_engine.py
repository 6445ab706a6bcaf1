"""The engine's plan against the nodes: interface pinning, and the ports it will bind."""

import pytest

from infergate.checks.facts import listening_of, rdma_devices_of
from infergate.checks.pinning import check_pinning, check_pinning_planned, required_pinning
from infergate.checks.ports import check_ports_free
from infergate.fixtures.facts import read_fact
from infergate.fixtures.report import fail_on


@pytest.mark.xdist_group("cluster")
def test_engine_env_pins_the_fabric(inventory):
    """The plan pins every socket the engine opens (Gloo, NCCL, the host IP it advertises,
    the HCAs) to the fabric: left alone, each picks its own interface and init hangs."""
    gpus = any(n.gpus for n in inventory.nodes)
    rdma = any(n.fabric.hcas for n in inventory.nodes)
    needed = required_pinning(inventory.engine.kind, gpus, rdma)
    for node in inventory.nodes:
        fail_on(node, check_pinning_planned(inventory.node_env(node), needed))


def test_engine_env_names_exist_on_node(interfaces, probes, node, inventory):
    """Every interface, HCA and address the node's engine environment names exists on that
    node and lies on the fabric."""
    hcas = read_fact(node, probes.of(node), rdma_devices_of)
    env = inventory.node_env(node)
    problems = check_pinning(env, interfaces, inventory.fabric.subnet, hcas, node)
    fail_on(node, problems)


@pytest.mark.xdist_group("cluster")
def test_engine_ports_free_on_head(probes, inventory):
    """The ports the engine binds on the head (API, dist-init rendezvous) are free."""
    head = inventory.head
    engine = inventory.engine
    planned = {engine.api_port: "API server", engine.dist_init_port: "dist-init rendezvous"}
    fail_on(head, check_ports_free(read_fact(head, probes.of(head), listening_of), planned))
