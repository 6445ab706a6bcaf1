"""Disk: room where the engine writes, and compile caches each node's own."""

import pytest

from infergate.checks.disk import container_plan
from infergate.checks.disk_space import check_disk_space, disk_of, largest_image_gib, node_needs
from infergate.checks.facts import model_of
from infergate.checks.shared_caches import check_shared_caches, writable_places
from infergate.fixtures.facts import every_node, read_fact
from infergate.fixtures.report import fail_on, fail_on_nodes


@pytest.mark.peers
def test_disk_room_for_image_model_and_caches(probes, node, inventory):
    """Every node has room where the engine writes: the image's layers where the image is not
    loaded yet, the model where it must be copied, and JIT headroom on every file system a
    compile cache writes to (the Docker root holds those no volume maps)."""
    facts, needs = _disk_needs(probes, node, inventory)
    fail_on(node, check_disk_space(needs, facts))


def _disk_needs(probes, node, inventory):
    """NODE's disks, and the room it needs on them."""
    seen = probes.every()
    facts = read_fact(node, seen[node.name], disk_of)
    model_missing = read_fact(node, seen[node.name], model_of).files is None
    largest = largest_image_gib(seen.values())
    return facts, node_needs(inventory, node, facts, largest, model_missing)


@pytest.mark.xdist_group("cluster")
def test_compile_caches_not_shared_between_nodes(probes, inventory, answered):
    """No node's compile or JIT cache (nor any writable volume) is on a network or FUSE file
    system, or on one another node writes too: engines compiling into one cache clobber each
    other's artifacts (vLLM#24601)."""
    mounts = {name: f.mounts for name, f in every_node(probes, answered, disk_of).items()}
    places = {
        n.name: writable_places(container_plan(inventory.node_env(n), inventory.engine.docker_args))
        for n in answered
    }
    fail_on_nodes(answered, check_shared_caches(places, mounts))
