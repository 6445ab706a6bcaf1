"""What the planned image itself makes of the plan, run once on every node together."""

import json

import pytest

from infergate.checks.collective import check_sweep_bandwidth, check_sweep_correct
from infergate.checks.inimage import (
    check_all_reduce,
    check_flags,
    check_model_supported,
    check_nccl_conf,
    collective_sweep,
    expected_transport,
    sweep_figures,
)
from infergate.checks.inimage_ran import check_nccl_ran
from infergate.checks.nccl import check_nccl_transport, parse_torchrun_log
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


def test_collective_sum_correct(image_facts_every_node, inventory, record_property):
    """Every size of the rendezvous's all-reduce sweep (NCCL on GPUs, else Gloo) summed right
    on every node, as nccl-tests' #wrong counts: a wrong sum is corrupted data. The results
    keep each node's latency at the small sizes and busbw at the largest."""
    results = {name: facts.part("rendezvous") for name, facts in image_facts_every_node.items()}
    figures = {name: sweep_figures(result) for name, result in results.items()}
    record_property("collective_sweep", json.dumps(figures))
    problems = {n: check_sweep_correct(collective_sweep(r)) for n, r in results.items()}
    fail_on_nodes(inventory.nodes, problems)


@pytest.mark.gpu
def test_nccl_transport_and_bandwidth(image_facts_every_node, inventory):
    """Where GPUs exist, the rendezvous's NCCL all-reduce went over the planned transport
    (NET/IB where the plan has HCAs: NET/Socket then means RDMA was not used), and its sweep's
    busbw at the planned largest size reaches the plan's floor."""
    expected = expected_transport(inventory)
    floor = inventory.thresholds.nccl_busbw_min_gbytes_per_sec
    largest = inventory.fabric.collective_max_mib * 2**20
    facts = image_facts_every_node
    problems = {
        n: _nccl_problems(f.part("rendezvous"), expected, floor, largest) for n, f in facts.items()
    }
    fail_on_nodes(inventory.nodes, problems)


def _nccl_problems(result, expected, floor, largest):
    """A rendezvous RESULT's NCCL transport and busbw; where NCCL did not run, that."""
    run = parse_torchrun_log(str(result.get("nccl_log", "")))
    not_ran = check_nccl_ran(result)
    found = not_ran or check_nccl_transport(run, expected)
    if floor is not None and not not_ran:
        found += check_sweep_bandwidth(collective_sweep(result), floor, largest)
    return found
