"""The weights one decoded token reads, from a model's config.json: the active parameters (an
MoE's shared experts and num_experts_per_tok of its routed ones per layer), each part at its
bytes per weight (the checkpoint's quantization, else its dtype).

Each matrix of a layer is counted once per token; the input embedding is one row (not
counted) and the LM head is read whole, tied or not. Norms, biases and conv filters are left
out. The rules and what they leave out: docs/performance.md#roofline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infergate.checks.kv_budget import DTYPE_BYTES

# the parts an ignore list can keep unquantized, by the module name a checkpoint gives them
PARTS = ("attention", "linear_attention", "mlp", "experts", "shared_expert", "router", "lm_head")
MODULE_NAMES = {
    "attention": "self_attn",
    "linear_attention": "linear_attn",
    "mlp": "mlp",
    "experts": "experts",
    "shared_expert": "shared_experts?",
    "router": "gate",
    "lm_head": "lm_head",
}
IGNORE_KEYS = ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules")
ALWAYS_FULL = frozenset({"router", "lm_head"})  # every checkpoint seen keeps these unquantized


@dataclass(frozen=True)
class Quantization:
    """Bytes per quantized weight (scales included) and the format's name."""

    bytes_per_weight: float
    name: str
    kept: frozenset[str] = ALWAYS_FULL  # parts left at the checkpoint's dtype


@dataclass(frozen=True)
class TokenWeights:
    """What one decoded token reads of the weights: parameters per part, and bytes."""

    params: Mapping[str, int]  # by part (PARTS)
    bytes: float
    quantization: str  # "fp8", "nvfp4", ..., or the dtype
    dtype_bytes: int

    @property
    def active_params(self) -> int:
        return sum(self.params.values())


def quantization_of(config: Mapping[str, Any]) -> Quantization | None:
    """config.json's quantization_config as bytes per weight; None: not quantized. A method
    this does not know raises ValueError naming it."""
    q = config.get("quantization_config")
    if not isinstance(q, dict):
        return None
    bytes_per, name = _format_bytes(q)
    return Quantization(bytes_per, name, ALWAYS_FULL | _ignored(q))


def _format_bytes(q: Mapping[str, Any]) -> tuple[float, str]:
    """One weight's bytes in Q's format: the packed value and its share of the block scale."""
    method = str(q.get("quant_method", "")).lower()
    algo = str(q.get("quant_algo", "")).upper()
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if algo == "NVFP4" or method == "nvfp4":
        return 0.5 + 1 / 16, "nvfp4"  # E2M1, an FP8 scale per 16
    if method == "mxfp4":
        return 0.5 + 1 / 32, "mxfp4"  # E2M1, an E8M0 scale per 32
    if method == "fp8" or algo == "FP8":
        block = q.get("weight_block_size") or [128, 128]
        return 1 + 4 / (block[0] * block[1]), "fp8"  # a float32 scale per block
    if method in ("awq", "gptq"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = int(q.get("group_size") or q.get("q_group_size") or 128)
        return _int_bytes(bits, group), f"int{bits} {method}"
    raise ValueError(f"quantization_config's quant_method {method or algo!r} is not one known")


def _int_bytes(bits: int, group: int) -> float:
    """A packed integer weight and its group's fp16 scale and packed zero point."""
    return bits / 8 + ((2 + bits / 8) / group if group > 0 else 0.0)


def _compressed_tensors(q: Mapping[str, Any]) -> tuple[float, str]:
    """llm-compressor's form: the first config group's weights."""
    groups: Mapping[str, Any] = q.get("config_groups") or {}
    first: Mapping[str, Any] = next(iter(groups.values()), {})
    weights: Mapping[str, Any] = first.get("weights") or {}
    bits, kind = int(weights.get("num_bits", 16)), str(weights.get("type", "int"))
    group = int(weights.get("group_size") or 0)
    if kind == "float" and bits == 4:
        return (0.5 + 1 / 16, "nvfp4") if group == 16 else (0.5 + 1 / 32, "mxfp4")
    if kind == "float" and bits == 8:
        return 1.0, "fp8"
    return _int_bytes(bits, group), f"int{bits}"


def _ignored(q: Mapping[str, Any]) -> frozenset[str]:
    """The parts an ignore list keeps whole: an entry that ends with the part's module name
    (`lm_head`, `re:.*linear_attn.*`), not one of its submodules (`linear_attn.conv1d`)."""
    entries = [str(e) for key in IGNORE_KEYS for e in q.get(key) or ()]
    return frozenset(
        part
        for part, name in MODULE_NAMES.items()
        if any(re.search(rf"(^|[.:*]){name}(\.\*|\$)?$", e) for e in entries)
    )


def token_weights(text: str, dtype: str | None = None) -> TokenWeights:
    """`cat MODEL/config.json` as the weights one decoded token reads; DTYPE (the engine's
    --dtype) over the config's. Raises ValueError naming what is missing.

    Sample (tiny-qwen3-moe, selftest/data/model-configs/): ``"num_local_experts": 8,
    "num_experts_per_tok": 2, "moe_intermediate_size": 128``"""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("config.json is not a JSON object")
    config: dict[str, Any] = {**doc, **doc.get("text_config", {})}
    try:
        params = _params(config)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"config.json lacks what the weights' size needs: {e!r}") from None
    named = dtype if dtype and dtype != "auto" else None
    full = DTYPE_BYTES.get(named or str(config.get("torch_dtype") or config.get("dtype")), 2)
    quant = quantization_of(doc)
    if quant is None:
        return TokenWeights(params, sum(params.values()) * full, named or _dtype(config), full)
    each = {p: full if p in quant.kept else quant.bytes_per_weight for p in params}
    total = sum(n * each[p] for p, n in params.items())
    return TokenWeights(params, total, quant.name, full)


def _dtype(config: Mapping[str, Any]) -> str:
    return str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")


def _params(c: Mapping[str, Any]) -> dict[str, int]:
    """Parameters read per token, by part, summed over the layers."""
    hidden, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    params = dict.fromkeys(PARTS, 0)
    for i in range(layers):
        mixer = _mixer(c, i)
        params[mixer] += _linear_attention(c) if mixer == "linear_attention" else _attention(c)
        for part, n in _feed_forward(c, i).items():
            params[part] += n
    params["lm_head"] = int(c["vocab_size"]) * hidden
    return {p: n for p, n in params.items() if n}


def _mixer(c: Mapping[str, Any], i: int) -> str:
    """Layer I's token mixer: full (or sliding) attention, or linear attention."""
    types = c.get("layer_types")
    if isinstance(types, list):
        return "linear_attention" if types[i] == "linear_attention" else "attention"
    if c.get("linear_num_value_heads"):  # Qwen3-Next's form: every interval-th layer full
        return (
            "attention"
            if (i + 1) % int(c.get("full_attention_interval", 4)) == 0
            else ("linear_attention")
        )
    return "attention"


def _attention(c: Mapping[str, Any]) -> int:
    """Q, K, V and O of one layer; MLA's low-rank form where kv_lora_rank is set."""
    hidden, heads = int(c["hidden_size"]), int(c["num_attention_heads"])
    if c.get("kv_lora_rank"):
        return _mla(c, hidden, heads)
    head_dim = int(c.get("head_dim") or hidden // heads)
    kv = int(c.get("num_key_value_heads") or heads)
    gate = 2 if c.get("attn_output_gate") else 1  # Qwen3-Next/3.5: q_proj also makes a gate
    return hidden * heads * head_dim * (gate + 1) + 2 * hidden * kv * head_dim


def _mla(c: Mapping[str, Any], hidden: int, heads: int) -> int:
    """DeepSeek-V2/V3's multi-head latent attention (modeling_deepseek.py's projections)."""
    rank, rope = int(c["kv_lora_rank"]), int(c["qk_rope_head_dim"])
    qk = int(c["qk_nope_head_dim"]) + rope
    v = int(c["v_head_dim"])
    q_rank = c.get("q_lora_rank")
    q = hidden * int(q_rank) + int(q_rank) * heads * qk if q_rank else hidden * heads * qk
    kv = hidden * (rank + rope) + rank * heads * (int(c["qk_nope_head_dim"]) + v)
    return q + kv + heads * v * hidden


def _linear_attention(c: Mapping[str, Any]) -> int:
    """A Gated DeltaNet layer (Qwen3-Next, Qwen3.5): in_proj_qkvz, in_proj_ba, out_proj."""
    hidden = int(c["hidden_size"])
    keys = int(c["linear_num_key_heads"]) * int(c["linear_key_head_dim"])
    value_heads = int(c["linear_num_value_heads"])
    values = value_heads * int(c["linear_value_head_dim"])
    return hidden * (2 * keys + 2 * values) + hidden * 2 * value_heads + values * hidden


def _experts(c: Mapping[str, Any]) -> int:
    return int(c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts") or 0)


def _feed_forward(c: Mapping[str, Any], i: int) -> dict[str, int]:
    """Layer I's MLP as one token reads it: dense, or the router, the routed experts it picks
    and the shared experts."""
    hidden, experts = int(c["hidden_size"]), _experts(c)
    if not experts or not _sparse(c, i):
        return {"mlp": 3 * hidden * int(c["intermediate_size"])}
    size = int(c.get("moe_intermediate_size") or c["intermediate_size"])
    shared = int(c.get("shared_expert_intermediate_size") or 0)
    shared += int(c.get("n_shared_experts") or 0) * size
    return {
        "router": hidden * experts,
        "experts": int(c["num_experts_per_tok"]) * 3 * hidden * size,
        "shared_expert": 3 * hidden * shared,
    }


def _sparse(c: Mapping[str, Any], i: int) -> bool:
    """Layer I is an MoE layer: not among Qwen's mlp_only_layers nor DeepSeek's first dense
    ones, and on Qwen's decoder_sparse_step and DeepSeek's moe_layer_freq."""
    if i in (c.get("mlp_only_layers") or ()) or i < int(c.get("first_k_dense_replace") or 0):
        return False
    step = int(c.get("decoder_sparse_step") or 1)
    return (i + 1) % step == 0 and i % int(c.get("moe_layer_freq") or 1) == 0
