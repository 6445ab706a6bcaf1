"""The engine's plan against the nodes: interface pinning (its ports: test_ports.py)."""

import pytest

from infergate.checks.facts import rdma_devices_of
from infergate.checks.pinning import check_pinning, check_pinning_planned, required_pinning
from infergate.engines.registry import engine_for
from infergate.fixtures.facts import read_fact
from infergate.fixtures.report import fail_on


@pytest.mark.xdist_group("cluster")
def test_engine_env_pins_the_fabric(inventory):
    """The plan pins every socket the engine opens (Gloo, NCCL, the host IP it advertises,
    the HCAs) to the fabric: left alone, each picks its own interface and init hangs."""
    needed = _needed_pinning(inventory)
    for node in inventory.nodes:
        fail_on(node, check_pinning_planned(inventory.node_env(node), needed))


def test_engine_env_names_exist_on_node(interfaces, probes, node, inventory):
    """Every interface, HCA and address the node's engine environment names exists on that
    node and lies on the fabric."""
    hcas = read_fact(node, probes.of(node), rdma_devices_of)
    env, subnet = inventory.node_env(node), inventory.fabric.subnet
    fail_on(node, check_pinning(env, interfaces, subnet, hcas, node))


def _needed_pinning(inventory):
    """What the plan's engine must pin, given whether the plan has GPUs and HCAs."""
    gpus = any(n.gpus for n in inventory.nodes)
    rdma = any(n.fabric.hcas for n in inventory.nodes)
    return required_pinning(engine_for(inventory), gpus, rdma)
