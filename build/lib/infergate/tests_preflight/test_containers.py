"""Nothing else runs on the nodes: a leftover container cost the two-Spark report a launch
(docs/notes.md#two-spark-report), and so does one another run of this suite left behind."""

from infergate.checks.containers import check_foreign_containers
from infergate.fixtures.report import fail_on


def test_no_foreign_containers(containers, node, inventory, run_id, inventory_path):
    """No container runs on a node unless it is this run's or the plan allows it
    (allow.containers), each one named with its image and the memory it holds; another
    run's is named with its run id, plan and age, and the command that removes that run."""
    running, memory = containers
    allowed = inventory.allow.containers
    fail_on(node, check_foreign_containers(running, memory, allowed, run_id, inventory_path))
