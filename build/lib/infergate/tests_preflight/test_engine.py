"""The engine's plan against the nodes: interface pinning (its ports: test_ports.py)."""

import pytest

from infergate.checks.facts import rdma_devices_of
from infergate.checks.pinning import check_pinning
from infergate.checks.plan_only import PLAN_CHECKS
from infergate.fixtures.facts import read_fact
from infergate.fixtures.report import fail_on, fail_on_nodes


@pytest.mark.xdist_group("cluster")
def test_engine_env_pins_the_fabric(inventory):
    """The plan pins every socket the engine opens (Gloo, NCCL, the host IP it advertises,
    the HCAs) to the fabric: left alone, each picks its own interface and init hangs."""
    problems = PLAN_CHECKS["test_engine_env_pins_the_fabric"](inventory)
    fail_on_nodes(inventory.nodes, problems)


def test_engine_env_names_exist_on_node(interfaces, probes, node, inventory):
    """Every interface, HCA and address the node's engine environment names exists on that
    node and lies on the fabric."""
    hcas = read_fact(node, probes.of(node), rdma_devices_of)
    env, subnet = inventory.node_env(node), inventory.fabric.subnet
    fail_on(node, check_pinning(env, interfaces, subnet, hcas, node))
