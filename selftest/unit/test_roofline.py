"""The decode roofline (infergate.inference.weights, .roofline, infergate.checks.
memory_bandwidth) on the lab's recorded model configs, composed configs of public models
(selftest/data/README.md), and public figures: dgx-spark-playbooks PR #91's 6.72 tok/s for
Llama 3.3 70B NVFP4 on one Spark, the makers' active parameter counts."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from infergate.checks.gpu import parse_nvidia_smi_query_gpu
from infergate.checks.memory_bandwidth import COPY_SCRIPT, Bandwidth, gpu_bandwidth, parse_copy
from infergate.inference.client import StreamRecord
from infergate.inference.metrics import LevelSummary, summarize_records
from infergate.inference.roofline import (
    RankBandwidth,
    RooflineFigures,
    check_fraction,
    decode_ceiling,
    figures,
    figures_from_dict,
    likely_cause,
    mean_context,
)
from infergate.inference.weights import token_weights
from infergate.reports import files
from infergate.reports.inference_html import render_html
from infergate.reports.inference_json import read_results
from selftest.unit.test_inference_lib import results

DATA = Path(__file__).parents[1] / "data"
CONFIGS = DATA / "model-configs"
SMOLLM2 = (CONFIGS / "smollm2-135m-instruct.json").read_text()
TINY_MOE = (CONFIGS / "tiny-qwen3-moe.json").read_text()
LLAMA_NVFP4 = (CONFIGS / "llama-3.3-70b-instruct-nvfp4.composed.json").read_text()
SEED = (CONFIGS / "qwen3.5-122b-a10b-fp8.composed.json").read_text()
GB10 = Bandwidth(273, "table")
# https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
MIXTRAL = {
    **{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32},
    **{"num_key_value_heads": 8, "intermediate_size": 14336, "num_local_experts": 8},
    **{"num_experts_per_tok": 2, "vocab_size": 32000, "torch_dtype": "bfloat16"},
}
# https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (the MLA and MoE keys)
DEEPSEEK_V3 = {
    **{"hidden_size": 7168, "num_hidden_layers": 61, "first_k_dense_replace": 3},
    **{"n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1},
    **{"moe_intermediate_size": 2048, "intermediate_size": 18432, "num_attention_heads": 128},
    **{"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128},
    **{"qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "moe_layer_freq": 1},
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}


def ranks(*gb_s: float) -> list[RankBandwidth]:
    return [RankBandwidth(f"node{i + 1}", Bandwidth(b, "table")) for i, b in enumerate(gb_s)]


def test_dense_model_reads_every_weight_once_per_token():
    w = token_weights(SMOLLM2)
    # SmolLM2-135M's 134,515,008 parameters less its 61 norms' 35,136 weights
    assert w.active_params == 134_515_008 - 61 * 576
    assert (w.bytes, w.quantization) == (2 * w.active_params, "bfloat16")
    assert w.params["lm_head"] == 49152 * 576  # tied, yet read whole as the head


def test_moe_reads_only_its_routed_experts():
    w = token_weights(TINY_MOE)
    every_expert = 4 * 8 * 3 * 256 * 128  # layers x experts x (gate, up, down)
    assert w.params["experts"] * 4 == every_expert  # 2 of 8
    assert w.params["router"] == 4 * 256 * 8
    assert w.active_params == 2_629_632


@pytest.mark.parametrize(
    ("config", "active_b"),
    [(MIXTRAL, 12.9), (DEEPSEEK_V3, 37)],  # the makers' "parameters per token", embedding in
    ids=["mixtral-8x7b", "deepseek-v3-mla"],
)
def test_active_parameters_match_the_makers_figures(config, active_b):
    w = token_weights(json.dumps(config))
    with_embedding = w.active_params + config["vocab_size"] * config["hidden_size"]
    assert abs(with_embedding / 1e9 - active_b) / active_b < 0.02, with_embedding


def test_pr91_roofline_of_llama_70b_nvfp4_on_one_spark():
    """40.61 GB/token (38.50 NVFP4 weights and scales, 2.10 BF16 LM head): 6.72 tok/s."""
    w = token_weights(LLAMA_NVFP4)
    lm_head = w.params["lm_head"] * 2
    assert round((w.bytes - lm_head) / 1e9, 2) == 38.50
    assert round(lm_head / 1e9, 2) == 2.10
    roof = decode_ceiling(w, 0, 0, ranks(273), (1, 1))
    assert round(roof.ceiling_tok_s, 2) == 6.72


def test_seed_model_on_two_sparks_tp2():
    """Qwen3.5-122B-A10B-FP8: ~10 B active (embedding in), FP8 but its BF16 LM head."""
    w = token_weights(SEED)
    assert 9.5e9 < w.active_params + 248320 * 3072 < 10.5e9
    assert w.quantization == "fp8"
    one = decode_ceiling(w, 24576, 1088, ranks(273), (1, 1))
    two = decode_ceiling(w, 24576, 1088, ranks(273, 273), (2, 1))
    assert round(two.weights_gb, 2) == 9.81
    assert round(two.ceiling_tok_s, 1) == 55.5
    assert two.ceiling_tok_s == pytest.approx(2 * one.ceiling_tok_s)


def test_pipeline_stages_add_no_speed_and_the_slowest_rank_bounds():
    w = token_weights(SMOLLM2)
    one = decode_ceiling(w, 0, 0, ranks(10), (1, 1))
    assert decode_ceiling(w, 0, 0, ranks(10, 10), (1, 2)).ceiling_tok_s == one.ceiling_tok_s
    slow = decode_ceiling(w, 0, 0, ranks(20, 10), (2, 1))
    assert (slow.slowest_node, slow.ceiling_tok_s) == ("node2", 2 * one.ceiling_tok_s)


def test_kv_cache_of_the_context_is_read_too():
    w = token_weights(SMOLLM2)
    bare = decode_ceiling(w, 0, 0, ranks(10), (1, 1))
    long = decode_ceiling(w, 23040, 8192, ranks(10), (1, 1))
    assert long.kv_gb == pytest.approx(23040 * 8192 / 1e9)
    assert long.ceiling_tok_s < bare.ceiling_tok_s


@pytest.mark.parametrize(
    ("quantization", "bytes_per_weight", "name"),
    [
        ({"quant_method": "mxfp4"}, 0.5 + 1 / 32, "mxfp4"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, 0.5 + 2.5 / 128, "int4 awq"),
        ({"quant_method": "gptq", "bits": 8, "group_size": 32}, 1 + 3 / 32, "int8 gptq"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float"}}},
            },
            0.5 + 1 / 32,
            "mxfp4",
        ),
    ],
)
def test_quantization_formats_as_bytes_per_weight(quantization, bytes_per_weight, name):
    config = {**MIXTRAL, "quantization_config": quantization}
    w = token_weights(json.dumps(config))
    quantized = w.active_params - w.params["lm_head"] - w.params["router"]
    expected = quantized * bytes_per_weight + 2 * (w.params["lm_head"] + w.params["router"])
    assert (w.bytes, w.quantization) == (pytest.approx(expected), name)


def test_an_ignore_list_keeps_a_whole_part_not_for_a_submodule():
    kept = {"quant_method": "fp8", "ignored_layers": ["lm_head", "re:.*self_attn.*"]}
    sub = {"quant_method": "fp8", "ignored_layers": ["model.layers.0.self_attn.q_norm"]}
    full, part = (
        token_weights(json.dumps({**MIXTRAL, "quantization_config": q})) for q in (kept, sub)
    )
    assert full.bytes - part.bytes == pytest.approx(full.params["attention"] * (2 - 1 - 4 / 128**2))


def test_unknown_quantization_and_missing_sizes_are_named():
    with pytest.raises(ValueError, match="'bitsandbytes' is not one known"):
        token_weights(
            json.dumps({**MIXTRAL, "quantization_config": {"quant_method": "bitsandbytes"}})
        )
    with pytest.raises(ValueError, match="hidden_size"):
        token_weights(json.dumps({"num_hidden_layers": 2}))


def test_gpu_bandwidth_from_recorded_names():
    spark = parse_nvidia_smi_query_gpu(
        (DATA / "gb10/query-gpu-index-name-memory.csv").read_text(),
        ("index", "name", "memory.total", "memory.used", "memory.free"),
    )
    h200 = parse_nvidia_smi_query_gpu((DATA / "h200-device/query-gpu.csv").read_text())
    assert gpu_bandwidth(spark[0].name).gb_s == 273
    assert gpu_bandwidth(h200[0].name).gb_s == 4800
    assert gpu_bandwidth("NVIDIA H100 PCIe").gb_s == 2000
    assert gpu_bandwidth("NVIDIA H100 80GB HBM3").gb_s == 3350
    assert gpu_bandwidth("Tesla T4") is None


def test_copy_measures_this_machine():
    """The copy the lab nodes run, run here: a figure between a slow laptop's and a socket's."""
    out = subprocess.run([sys.executable, "-c", COPY_SCRIPT], capture_output=True, text=True)
    assert 1 < parse_copy(out.stdout) < 1000, out
    with pytest.raises(ValueError, match="no copy_bytes_per_s"):
        parse_copy("MemoryError\n")


def c1_level(tpot_s: float, output: int = 17) -> LevelSummary:
    """A level at c = 1 of one request: 64 prompt tokens, OUTPUT tokens at TPOT_S."""
    times = tuple(0.1 + i * tpot_s for i in range(output))
    usage = {"completion_tokens": output, "prompt_tokens": 64}
    record = StreamRecord(200, "", 0.0, times, times[-1], "x", "", "length", usage, "")
    return summarize_records([record], times[-1], 1)


def test_fraction_below_the_plan_is_red_leading_with_the_likely_cause():
    roof = decode_ceiling(token_weights(SMOLLM2), 23040, 72, ranks(10), (1, 2))
    found = figures(roof, c1_level(0.1))  # 10 tok/s
    assert found.measured_tok_s == pytest.approx(10)
    assert found.fraction == pytest.approx(10 / roof.ceiling_tok_s)
    cause = likely_cause(["--enforce-eager"], 1, 2, 0)
    (problem,) = check_fraction(found, 0.9, cause)
    assert "decode 10 tok/s at c=1" in problem.found
    assert f"{roof.ceiling_tok_s:.3g} tok/s roofline" in problem.found
    assert "inference.roofline.min_fraction" in problem.planned
    assert problem.remedy.startswith("the engine runs eager (--enforce-eager")
    assert check_fraction(found, 0.1, cause) == []
    assert figures_from_dict(found.as_dict()) == found


def test_likely_cause_follows_the_plan():
    assert likely_cause([], 2, 2, 1).startswith("TP 2 spans 2 nodes")
    assert likely_cause([], 1, 1, 1).startswith("the engine's per-step overhead")


def test_mean_context_is_the_prompt_and_half_the_answer():
    assert mean_context(c1_level(0.1, output=16)) == 64 + 8


def test_figures_reach_results_json_and_report_html(tmp_path: Path):
    """The lab's SmolLM2 figures, written and read back, and shown in report.html; a run
    without a ceiling says why."""
    roof = decode_ceiling(token_weights(SMOLLM2), 23040, 110, ranks(24.3), (1, 2))
    found = figures(roof, c1_level(0.028))
    json_path, html_path = files.write_report(tmp_path, replace(results(), roofline=found))
    assert read_results(json_path).roofline == found
    page = html_path.read_text()
    assert "Decode roofline" in page
    assert f"= {found.fraction:.2g} of it" in page
    unknown = RooflineFigures(unknown="node1 (10.0.0.1): no memory bandwidth known")
    assert "roofline: not computed: node1" in render_html(replace(results(), roofline=unknown))
