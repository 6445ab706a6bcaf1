"""Offline nodes: the engine loads from local paths, and the plan says when the hub is away."""

import pytest

from infergate.checks.disk import container_plan
from infergate.checks.offline import (
    check_offline_mode,
    check_sources_local,
    hub_dial_of,
    hub_target,
    offline_set,
    planned_sources,
)
from infergate.fixtures.facts import every_node, read_fact
from infergate.fixtures.report import fail_on, fail_on_nodes


def test_tokenizer_is_a_local_path(probes, node, inventory):
    """The engine's tokenizer flag, if any, names a local path the container sees, not a hub
    id that every launch downloads (and that fails where the hub is out of reach)."""
    plan = container_plan(inventory.node_env(node), inventory.engine.docker_args)
    failed = read_fact(node, probes.of(node), hub_dial_of)
    sources = planned_sources(inventory.engine.flags)
    target = hub_target(plan.env)
    fail_on(node, check_sources_local(sources, inventory.model.path, plan.volumes, target, failed))


@pytest.mark.xdist_group("cluster")
def test_hub_offline_mode_where_the_hub_is_unreachable(probes, inventory, answered):
    """Every node that does not reach the model hub (HF_ENDPOINT, or its HTTPS proxy) runs with
    HF_HUB_OFFLINE=1, so nothing waits on the hub at launch; the failure says which nodes do
    reach it."""
    failed = every_node(probes, answered, hub_dial_of)
    offline, endpoint = _planned_offline(inventory)
    fail_on_nodes(answered, check_offline_mode(failed, offline, endpoint))


def _planned_offline(inventory):
    """Whether each node's container runs hub-offline, and the hub the head's would reach."""
    envs = {
        n.name: container_plan(inventory.node_env(n), inventory.engine.docker_args).env
        for n in inventory.nodes
    }
    offline = {name: offline_set(env) for name, env in envs.items()}
    return offline, hub_target(envs[inventory.head.name]).endpoint
