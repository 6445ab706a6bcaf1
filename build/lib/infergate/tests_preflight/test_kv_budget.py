"""The planned context length fits the KV cache every rank can hold."""

import pytest

from infergate.checks.kv_budget import (
    GIB,
    check_context_fits,
    kv_shape_of,
    planned_context,
    rank_kv_budget,
    rank_memory_of,
)
from infergate.engines.registry import engine_for
from infergate.fixtures.facts import read_fact
from infergate.fixtures.report import fail_on
from infergate.plan.model import flag_value


def test_context_length_fits_kv_cache(probes, node, inventory):
    """One request of the planned --max-model-len (SGLang: --context-length) fits one rank's
    KV cache: vLLM would otherwise refuse to start minutes into the launch ("max seq len ...
    is larger than ... KV cache")."""
    engine, adapter, sections = inventory.engine, engine_for(inventory), probes.of(node)
    shape = read_fact(node, sections, kv_shape_of)
    context = planned_context(adapter, engine.flags, shape)
    if context is None:
        pytest.skip(
            "engine.flags leave the context length to the engine (-1 or auto), or "
            "config.json names no max_position_embeddings"
        )
    budget = _rank_budget(node, inventory, adapter, sections)
    if budget is None:
        pytest.skip(f"{node.where}: no GPUs planned, and {adapter.no_cpu_kv_budget}")
    parallel = (engine.tensor_parallel, engine.pipeline_parallel)
    cache_dtype = flag_value(engine.flags, "--kv-cache-dtype")
    fail_on(node, check_context_fits(shape, context, budget, parallel, cache_dtype))


def _rank_budget(node, inventory, adapter, sections):
    """One rank's KV budget on NODE, from its memory and its share of the weights."""
    memory = read_fact(node, sections, lambda s: rank_memory_of(s, node.gpus))
    world = sum(n.ranks for n in inventory.nodes)
    weights = (inventory.model.size_gib or 0.0) * GIB / world
    env = inventory.node_env(node)
    return rank_kv_budget(adapter, inventory.engine.flags, env, memory, weights)
