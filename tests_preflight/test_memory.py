"""Memory: every node can hold its share of the model, the KV budget and headroom."""

from fixtures.report import fail_on
from infergate.checks.memory import check_memory_available


def test_memory_available_for_plan(memory, node, inventory):
    """Every node has enough memory available (MemAvailable, within its cgroup limit) for its
    share of the weights plus the KV budget and headroom the plan sets."""
    fail_on(node, check_memory_available(memory, inventory.mem_needed_gib(node)))
