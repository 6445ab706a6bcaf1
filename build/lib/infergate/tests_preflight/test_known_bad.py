"""No version in the planned image is on the known-bad list (infergate/data/known_bad.yaml,
each entry with its public source)."""

import pytest

from infergate.checks.known_bad import check_known_bad
from infergate.fixtures.report import fail_on

# one worker runs every in-image test: the rendezvous must happen once per run
pytestmark = [pytest.mark.image, pytest.mark.xdist_group("cluster")]


def test_image_versions_not_known_bad(image_facts, node):
    """The image's NCCL, torch, engine and library versions are none that the field reports
    broken for multi-GPU inference."""
    fail_on(node, check_known_bad(image_facts.part("versions")))
