"""What the launch's own container gives the engine, and the chat template it will serve,
read in the planned image by the in-image probe (one container per node, shared with
test_in_image.py)."""

import pytest

from infergate.checks.launch_container import (
    check_caches_writable,
    check_chat_template,
    check_locked_memory,
    check_open_files,
    most_in_flight,
)
from infergate.fixtures.report import fail_on

# the in-image probe runs once per run, on one worker (test_in_image.py says why)
pytestmark = [pytest.mark.image, pytest.mark.xdist_group("cluster")]


def test_chat_template_renders_in_image(image_facts, node):
    """The model has a chat template, or the plan passes one (--chat-template), and the
    image's transformers renders a message with it: else every /v1/chat/completions
    answers 400 while /v1/completions works."""
    fail_on(node, check_chat_template(image_facts.part("chat-template")))


def test_launch_container_open_files(image_facts, node, inventory):
    """The launch's container (engine.docker_args included) lets the engine open at least
    max(thresholds.min_open_files, 4 x the most requests the load holds in flight) files."""
    in_flight = most_in_flight(inventory.inference)
    floor = inventory.thresholds.min_open_files
    fail_on(node, check_open_files(image_facts.part("container"), in_flight, floor))


def test_launch_container_locked_memory_unlimited(image_facts, node):
    """Where the plan names HCAs, locked memory is unlimited in the launch's container."""
    if not node.fabric.hcas:
        pytest.skip(f"{node.where}: no HCAs planned ({node.key_of('fabric.hcas')})")
    fail_on(node, check_locked_memory(image_facts.part("container")))


def test_launch_container_caches_writable(image_facts, node):
    """HF_HOME, VLLM_CACHE_ROOT, TRITON_CACHE_DIR and ~/.cache are writable by the launch
    container's user (engine.docker_args `-u`, `-v`)."""
    fail_on(node, check_caches_writable(image_facts.part("container")))
