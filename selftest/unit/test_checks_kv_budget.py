"""The context length against one rank's KV cache (infergate.checks.kv_budget), on the lab's
recorded model configs and a recorded H200's nvidia-smi (selftest/data/README.md)."""

from pathlib import Path

import pytest

from infergate.checks.kv_budget import (
    GIB,
    RankMemory,
    check_context_fits,
    cpu_kv_budget,
    kv_bytes_per_token,
    kv_shape_of,
    parse_model_config,
    parse_token_count,
    planned_context,
    rank_kv_budget,
    rank_memory_of,
)
from infergate.checks.probe import Section
from infergate.engines.registry import engine_for
from infergate.engines.signatures import named, signatures_for

DATA = Path(__file__).parents[1] / "data"
SMOLLM2 = (DATA / "model-configs/smollm2-135m-instruct.json").read_text()
TINY_MOE = (DATA / "model-configs/tiny-qwen3-moe.json").read_text()
LAB_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
VLLM, SGLANG = engine_for("vllm"), engine_for("sglang")


def test_config_read_as_the_kv_cache_sees_it():
    shape = parse_model_config(SMOLLM2)
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.dtype) == (30, 3, 64, "bfloat16")
    assert shape.max_position == 8192
    moe = parse_model_config(TINY_MOE)
    assert (moe.layers, moe.kv_heads, moe.head_dim) == (4, 2, 64)


def test_a_config_without_the_sizes_is_named():
    with pytest.raises(ValueError, match="num_attention_heads"):
        parse_model_config('{"model_type": "llama"}')


def test_bytes_per_token_follow_the_ranks_share():
    shape = parse_model_config(SMOLLM2)
    # the lab's plan: PP 2, 15 layers a stage, K and V of 3 heads of 64 in bf16
    assert kv_bytes_per_token(shape, 1, 2, None) == 15 * 2 * 3 * 64 * 2
    assert kv_bytes_per_token(shape, 1, 2, "fp8_e4m3") == 15 * 2 * 3 * 64
    moe = parse_model_config(TINY_MOE)
    assert kv_bytes_per_token(moe, 2, 1, None) == 4 * 2 * 1 * 64 * 2  # 2 KV heads over TP 2
    assert kv_bytes_per_token(moe, 4, 1, None) == 4 * 2 * 1 * 64 * 2  # replicated beyond


@pytest.mark.parametrize(
    ("value", "tokens"),
    [("1024", 1024), ("32k", 32000), ("32K", 32768), ("1M", 2**20), ("-1", None), ("auto", None)],
)
def test_context_lengths_read_as_vllm_reads_them(value, tokens):
    assert parse_token_count(value) == tokens


def test_the_labs_healthy_plan_fits_and_a_huge_context_does_not():
    shape = parse_model_config(SMOLLM2)
    budget = cpu_kv_budget(LAB_ENV, "VLLM_CPU_KVCACHE_SPACE")
    assert budget is not None
    fits = planned_context(VLLM, ("--max-model-len", "1024"), shape)
    assert fits == (1024, "--max-model-len 1024")
    assert check_context_fits(shape, fits, budget, (1, 2), None) == []
    huge = planned_context(VLLM, ("--max-model-len=131072",), shape)
    assert huge is not None
    (problem,) = check_context_fits(shape, huge, budget, (1, 2), None)
    assert problem.found.startswith(f"{GIB // 11520} tokens fit one rank's KV cache")
    assert "VLLM_CPU_KVCACHE_SPACE=1 GiB per rank" in problem.found
    assert problem.planned == "131072 tokens (--max-model-len 131072)"
    assert problem.remedy.startswith(f"lower --max-model-len to at most {GIB // 11520}")


def test_without_the_flag_the_models_own_length_is_planned():
    shape = parse_model_config(SMOLLM2)
    assert planned_context(VLLM, (), shape) == (
        8192,
        "the model's max_position_embeddings (no --max-model-len)",
    )
    assert planned_context(SGLANG, ("--context-length", "-1"), shape) is None


def test_a_cpu_node_without_kv_space_is_left_to_the_engine():
    memory = RankMemory(0, None, 8 * GIB)
    assert rank_kv_budget(VLLM, (), {}, memory, 0.0) is None
    assert rank_kv_budget(SGLANG, (), LAB_ENV, memory, 0.0) is None


def test_an_h200_rank_gives_its_memory_times_utilization_less_its_weights():
    sections = {
        "gpu-query": Section(0, (DATA / "h200/query-gpu.csv").read_text()),
        "meminfo": Section(0, (DATA / "h200/meminfo-head.txt").read_text()),
        "cgroup-memory": Section(0, ""),
        "model-config": Section(0, SMOLLM2),
    }
    memory = rank_memory_of(sections, gpus=2)
    assert memory.gpu_total_mib == 143771
    flags = ("--gpu-memory-utilization", "0.5")
    budget = rank_kv_budget(VLLM, flags, {}, memory, weights_per_rank=60 * GIB)
    assert budget is not None
    assert budget.bytes == pytest.approx(143771 * 2**20 * 0.5 - 60 * GIB)
    assert "140.4 GiB x 0.5 utilization - 60.0 GiB of weights per rank" in budget.source
    shape = kv_shape_of(sections)
    (problem,) = check_context_fits(
        shape, (10**7, "--max-model-len 10000000"), budget, (2, 1), None
    )
    assert "TP 2, PP 1" in problem.found


@pytest.mark.parametrize(
    "line",
    [
        # vLLM 0.32.0 as the lab image has it (vllm/v1/core/kv_cache_utils.py:1031, its
        # format string filled in with the lab plan's figures under --max-model-len 131072)
        "ValueError: To serve at least one request with the model's max seq len (131072), "
        "(1.41 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(1.00 GiB). Based on the available memory, the estimated maximum model length is "
        "93206. Try increasing `gpu_memory_utilization` (which also controls",
        # vLLM's main branch (_check_enough_kv_cache_memory: "models's")
        "ValueError: To serve at least one request with the models's max seq len (131072), "
        "(2.81 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(1.00 GiB). Based on the available memory, the estimated maximum model length is "
        "46592. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine.",
        # vLLM's v0 engine, as github.com/vllm-project/vllm users quote it
        "ValueError: The model's max seq len (32768) is larger than the maximum number of "
        "tokens that can be stored in KV cache (16832). Try increasing `gpu_memory_utilization` "
        "or decreasing `max_model_len` when initializing the engine.",
    ],
)
def test_vllms_kv_cache_refusal_is_named_in_the_launch_log(line):
    first = next(s for s in signatures_for("vllm") if s.search(line))
    assert first == named("vllm-kv-cache-too-small")
    assert "pytest -m preflight -k context_length" in first.remedy
