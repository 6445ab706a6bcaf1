"""Memory: every node can hold its share of the model, the KV budget and headroom."""

import pytest

from infergate.checks.facts import memory_of
from infergate.checks.memory import check_memory_available, check_tp_balance
from infergate.fixtures.facts import every_node
from infergate.fixtures.report import fail_on, fail_on_nodes


def test_memory_available_for_plan(memory, node, inventory):
    """Every node has enough memory available (MemAvailable, within its cgroup limit) for its
    share of the weights plus the KV budget and headroom the plan sets."""
    fail_on(node, check_memory_available(memory, inventory.mem_needed_gib(node)))


@pytest.mark.xdist_group("cluster")
def test_memory_balanced_across_nodes(probes, inventory, answered):
    """No node has much less memory than the others: SGLang refuses to start below 0.9 of
    the best (`memory capacity is unbalanced`), vLLM sizes every KV cache to the smallest."""
    usable = {n: m.usable for n, m in every_node(probes, answered, memory_of).items()}
    ratio = inventory.thresholds.tp_balance_min_ratio
    fail_on_nodes(answered, check_tp_balance(usable, ratio))
