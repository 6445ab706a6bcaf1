"""The serving image: on every node, the same image ID."""

import pytest

from infergate.checks.facts import image_id_of
from infergate.checks.image import check_image_parity
from infergate.fixtures.facts import every_node
from infergate.fixtures.report import fail_on_nodes


@pytest.mark.xdist_group("cluster")
def test_image_same_id_on_every_node(probes, inventory, answered):
    """Every node has the planned image, and the same image ID (`.Id`, not RepoDigests);
    a node without it is told the exact `docker save | ssh docker load` that copies it."""
    ids = every_node(probes, answered, image_id_of)
    image = inventory.image
    fail_on_nodes(answered, check_image_parity(image.ref, ids, answered, image.id))
