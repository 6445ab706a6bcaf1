"""Nothing else runs on the nodes: the seeds' leftover container cost a launch."""

from fixtures.report import fail_on
from infergate.checks.containers import check_foreign_containers


def test_no_foreign_containers(containers, node, inventory):
    """No container runs on a node unless the plan allows it (allow.containers), each one
    named with its image and the memory it holds."""
    running, memory = containers
    fail_on(node, check_foreign_containers(running, memory, inventory.allow.containers))
