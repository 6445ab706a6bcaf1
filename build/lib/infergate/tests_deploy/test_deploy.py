"""The launch came up as planned: every node joined, the API serves the planned model, every
rank is alive, and no node logged a fatal line. The `deployment` fixture performs the launch,
milestones and deadlines included; these tests read what it left."""

from __future__ import annotations

import pytest

from infergate.deploy.executor import Deployment
from infergate.deploy.failure import fatal_problem
from infergate.deploy.gates import check_served
from infergate.fixtures.report import fail_on, fail_on_nodes
from infergate.plan.apikey import check_authorized
from infergate.plan.model import Inventory, Node

pytestmark = pytest.mark.xdist_group("deployment")


def test_every_planned_node_joined(deployment: Deployment, inventory: Inventory) -> None:
    """Every node of the plan reached every milestone planned for it, by the engine's own
    logs (and `ray status` where the engine is Ray): a head alone is not a cluster."""
    problems = deployment.unreached()
    fail_on_nodes(inventory.nodes, problems, "not every planned node joined the launch")


def test_endpoint_answers_with_the_planned_model(
    deployment: Deployment, inventory: Inventory
) -> None:
    """The head's API answers, with the API key the suite sends, and /v1/models lists the
    planned served name."""
    answer = deployment.get("/v1/models", 10)
    url = f"{deployment.launch.endpoint}/v1/models"
    fail_on(inventory.head, check_authorized(answer.status, url, deployment.api_key))
    fail_on(inventory.head, check_served(answer, inventory.model.served_name))


def test_rank_is_alive(deployment: Deployment, node: Node) -> None:
    """The node's engine container still runs with every process it had when the API became
    ready: /health on the head stays 200 after a worker died, and the head may even exit 0."""
    fail_on(node, deployment.rank_problems(node.name))


def test_no_fatal_line_in_the_log(deployment: Deployment, node: Node) -> None:
    """Nothing in the node's engine log says the launch failed (unrecognized arguments,
    unbalanced memory, NCCL WARN, Traceback, CUDA error, out of memory)."""
    watch = deployment.catch_up(node.name)
    fail_on(node, [fatal_problem(watch)] if watch.fatal else [])
