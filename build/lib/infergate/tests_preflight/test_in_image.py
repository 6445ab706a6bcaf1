"""What the planned image itself makes of the plan, run once on every node together."""

import pytest

from infergate.checks.inimage import (
    check_all_reduce,
    check_flags,
    check_model_supported,
    check_nccl_conf,
    expected_transport,
    nccl_allreduce,
)
from infergate.checks.inimage_ran import check_nccl_ran
from infergate.checks.nccl import check_nccl_bandwidth, check_nccl_transport, parse_torchrun_log
from infergate.engines.registry import engine_for
from infergate.fixtures.facts import settled
from infergate.fixtures.report import fail_on, fail_on_nodes
from infergate.preflight.in_image import ran_problems

# one worker runs every in-image test: the rendezvous must happen once per run
pytestmark = [pytest.mark.image, pytest.mark.xdist_group("cluster")]


def test_probe_container_runs(in_image, node, inventory):
    """The planned image starts a container on every node, and the probe in it runs to its
    end: every other in-image check reads what it printed."""
    facts = settled(in_image[node.name])
    fail_on(node, list(facts.blocked) or ran_problems(facts, inventory))


def test_model_architecture_supported_by_image(image_facts, node, inventory):
    """The image's transformers reads the model's config.json (AutoConfig), and its engine's
    model registry lists the architecture (the two-Spark report's image was too old for Qwen3.5)."""
    problems = check_model_supported(
        image_facts.part("model-config"), image_facts.part("registry"), engine_for(inventory)
    )
    fail_on(node, problems)


def test_engine_flags_accepted_by_image(image_facts, node, inventory):
    """Every planned flag is accepted by the engine's own parser in the planned image; a flag
    of the other engine is named as such (`--language-model-only` is vLLM's)."""
    fail_on(node, check_flags(image_facts.part("flags"), engine_for(inventory)))


def test_no_stray_nccl_conf_in_image(image_facts, node):
    """The image carries no /etc/nccl.conf that would override the plan's NCCL settings."""
    fail_on(node, check_nccl_conf(image_facts.part("nccl-conf")))


def test_rendezvous_all_reduce_across_nodes(image_facts_every_node, inventory):
    """Before any engine: an all-reduce across every node inside the planned image, with the
    plan's environment and dist-init address, finishes within its deadline."""
    world, deadline = len(inventory.nodes), inventory.thresholds.rendezvous_timeout_s
    results = {name: facts.part("rendezvous") for name, facts in image_facts_every_node.items()}
    problems = {name: check_all_reduce(r, world, deadline) for name, r in results.items()}
    fail_on_nodes(inventory.nodes, problems)


@pytest.mark.gpu
def test_nccl_transport_and_bandwidth(image_facts_every_node, inventory):
    """Where GPUs exist, the rendezvous's NCCL all-reduce went over the planned transport
    (NET/IB where the plan has HCAs: NET/Socket then means RDMA was not used) at no less
    than the plan's bus bandwidth floor."""
    expected = expected_transport(inventory)
    floor = inventory.thresholds.nccl_busbw_min_gbytes_per_sec
    facts = image_facts_every_node
    problems = {n: _nccl_problems(f.part("rendezvous"), expected, floor) for n, f in facts.items()}
    fail_on_nodes(inventory.nodes, problems)


def _nccl_problems(result, expected, floor):
    """A rendezvous RESULT's NCCL transport and bus bandwidth; where NCCL did not run, that."""
    run = parse_torchrun_log(str(result.get("nccl_log", "")))
    not_ran = check_nccl_ran(result)
    found = not_ran or check_nccl_transport(run, expected)
    if floor is not None and not not_ran:
        found += check_nccl_bandwidth(nccl_allreduce(result), floor)
    return found
