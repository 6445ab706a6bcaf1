"""The planned context length against the KV cache each rank can hold, before any launch:
vLLM refuses a context that does not fit minutes into the launch, after the weights loaded.

The arithmetic is vLLM's (vllm/v1/core/kv_cache_utils.py); the budget is the most a rank can
give, so only a plan that cannot fit however the engine profiles fails
(docs/checks.md#kv-cache-budget).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infergate.checks.facts import ProbeError, Sections, gpus_of, memory_of, section_text
from infergate.engines.engine import Engine
from infergate.plan.model import flag_value
from infergate.problems import Problem

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}


@dataclass(frozen=True)
class KvShape:
    """What one token costs in the KV cache, from config.json: `layers` of full attention, the
    weights' `dtype` (the cache's unless the plan sets --kv-cache-dtype), `max_position` (the
    engine's default context), and an MLA model's kv_lora_rank + qk_rope_head_dim."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    max_position: int | None
    mla_width: int | None = None


def parse_model_config(text: str) -> KvShape:
    """`cat MODEL/config.json` (the host probe's model-config section) as the KV cache sees it.

    Sample (SmolLM2-135M-Instruct, selftest/data/model-configs/): ``"num_hidden_layers": 30,
    "num_key_value_heads": 3, "head_dim": 64, "dtype": "bfloat16"``. A multimodal model's
    language part is its text_config. Raises ValueError when the fields are not there."""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("config.json is not a JSON object")
    config: dict[str, Any] = {**doc, **doc.get("text_config", {})}
    try:
        heads = int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        layer_types = config.get("layer_types")
        layers = int(config["num_hidden_layers"])
        # hybrids: sliding or linear layers keep fewer tokens
        if isinstance(layer_types, list):
            layers = sum(t == "full_attention" for t in layer_types)
        mla = config.get("kv_lora_rank")
        return KvShape(
            layers=layers,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=head_dim,
            dtype=str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"),
            max_position=config.get("max_position_embeddings"),
            mla_width=int(mla) + int(config.get("qk_rope_head_dim", 0)) if mla else None,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"config.json lacks what the KV cache size needs: {e!r}") from None


def parse_token_count(value: str) -> int | None:
    """A context length as vLLM reads it: 32768, 32k (x1000), 32K (x1024), 1m, 1M; None for
    -1 and auto (the engine then fits the length to the memory itself)."""
    scale = {"k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2}.get(value[-1:], 1)
    number = value[:-1] if scale > 1 else value
    try:
        count = float(number) * scale
    except ValueError:
        return None
    return int(count) if count > 0 else None


def kv_bytes_per_token(shape: KvShape, tp: int, pp: int, cache_dtype: str | None) -> int:
    """One token's K and V on the rank of the biggest pipeline stage."""
    if cache_dtype and cache_dtype.startswith("fp8"):
        size = 1
    else:
        size = DTYPE_BYTES.get(cache_dtype or shape.dtype, DTYPE_BYTES.get(shape.dtype, 2))
    layers = math.ceil(shape.layers / pp)
    if shape.mla_width:
        return layers * shape.mla_width * size
    return layers * 2 * max(1, shape.kv_heads // tp) * shape.head_dim * size


@dataclass(frozen=True)
class KvBudget:
    """The bytes one rank can give its KV cache, and how they were reckoned (for the message)."""

    bytes: float
    source: str


def cpu_kv_budget(env: Mapping[str, str], variable: str) -> KvBudget | None:
    """A CPU rank's KV cache as the engine's VARIABLE sizes it (vLLM's VLLM_CPU_KVCACHE_SPACE),
    in GiB per rank; None where it is unset (the engine then sizes it from the node's memory)."""
    value = env.get(variable, "").strip()
    if not value or not value.isdigit() or int(value) == 0:
        return None
    return KvBudget(int(value) * GIB, f"{variable}={value} GiB per rank")


def gpu_kv_budget(memory_bytes: float, utilization: float, weights_bytes: float) -> KvBudget:
    """A GPU rank: its memory times the planned utilization less its share of the weights."""
    source = (
        f"{memory_bytes / GIB:.1f} GiB x {utilization:g} utilization - "
        f"{weights_bytes / GIB:.1f} GiB of weights per rank"
    )
    return KvBudget(memory_bytes * utilization - weights_bytes, source)


def utilization(engine: Engine, flags: Sequence[str]) -> float:
    """The fraction of GPU memory the engine takes: its flag, else the engine's default."""
    value = flag_value(flags, engine.memory_flag)
    return float(value) if value else engine.memory_default


def planned_context(engine: Engine, flags: Sequence[str], shape: KvShape) -> tuple[int, str] | None:
    """The context length the plan asks for and where it comes from; None when the engine
    fits it itself (-1, auto) or nothing says it."""
    name = engine.context_flag
    value = flag_value(flags, name)
    if value is not None:
        count = parse_token_count(value)
        return (count, f"{name} {value}") if count else None
    if shape.max_position:
        return int(shape.max_position), "the model's max_position_embeddings (no " + name + ")"
    return None


def check_context_fits(
    shape: KvShape,
    context: tuple[int, str],
    budget: KvBudget,
    parallel: tuple[int, int],
    cache_dtype: str | None,
) -> list[Problem]:
    """One request of the planned context length fits one rank's KV cache."""
    per_token = kv_bytes_per_token(shape, *parallel, cache_dtype)
    fits = max(0, int(budget.bytes // per_token))
    tokens, said = context
    if tokens <= fits:
        return []
    flag = said.split()[0] if said.startswith("--") else "--max-model-len"
    return [
        Problem(
            found=f"{fits} tokens fit one rank's KV cache ({budget.source}; "
            f"{per_token} bytes per token at TP {parallel[0]}, PP {parallel[1]})",
            planned=f"{tokens} tokens ({said})",
            remedy=f"lower {flag} to at most {fits} in engine.flags, or give the KV cache "
            "more memory (the utilization flag, VLLM_CPU_KVCACHE_SPACE on CPU, more TP/PP, "
            "or --kv-cache-dtype fp8)",
        )
    ]


@dataclass(frozen=True)
class RankMemory:
    """What the host probe says a rank of the node can use: the plan's `gpus` on it (0: vLLM's
    CPU backend), its smallest GPU's memory (None: unified memory, GB10's), and MemTotal in
    bytes (a GB10's GPU memory is the host's)."""

    gpus: int
    gpu_total_mib: int | None
    mem_total: int


def rank_kv_budget(
    engine: Engine,
    flags: Sequence[str],
    env: Mapping[str, str],
    memory: RankMemory,
    weights_per_rank: float,
) -> KvBudget | None:
    """The most one rank of the node can give its KV cache; None where the engine sizes it
    from memory this judge does not see (vLLM's CPU backend without VLLM_CPU_KVCACHE_SPACE,
    SGLang on CPU)."""
    if memory.gpus == 0:
        return cpu_kv_budget(env, engine.cpu_kv_env) if engine.cpu_kv_env else None
    total = memory.gpu_total_mib * 2**20 if memory.gpu_total_mib else memory.mem_total
    return gpu_kv_budget(total, utilization(engine, flags), weights_per_rank)


def kv_shape_of(sections: Sections) -> KvShape:
    """The host probe's model-config section as the KV cache sees it."""
    try:
        return parse_model_config(section_text(sections, "model-config"))
    except ValueError as e:  # a ProbeError is one too
        raise ProbeError(str(e)) from None


def rank_memory_of(sections: Sections, gpus: int) -> RankMemory:
    """The node's smallest GPU (nvidia-smi's memory.total) where the plan gives it GPUs, and
    MemTotal."""
    smallest = min((g.memory_total_mib or 0 for g in gpus_of(sections)), default=0) if gpus else 0
    return RankMemory(gpus, smallest or None, memory_of(sections).total)
