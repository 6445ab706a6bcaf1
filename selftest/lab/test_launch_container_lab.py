"""The KV budget, the chat template and the launch container's limits and caches against
the real lab: each fault (a plan change, or one made for real on one node: its dockerd's
default ulimit, a cache directory read-only, the template gone from its model) turns exactly
its test red, naming the node. Green after `clear`: each image run asserts its whole red
set, and runs after the previous test's fault was cleared, so the read-only cache's run shows
node2's open files green again (its dockerd restarted as the lab runs it) and the chat
template's run the caches on node1; the healthy lab is green
(test_preflight_lab.test_healthy_lab_all_green_with_the_image)."""

from __future__ import annotations

import pytest

from selftest.lab.test_preflight_lab import HOST_ONLY, NODES, PARITY, on, with_plan
from selftest.suite import run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]

KV = "test_kv_budget.py::test_context_length_fits_kv_cache"
CHAT = "test_launch_container.py::test_chat_template_renders_in_image"
OPEN_FILES = "test_launch_container.py::test_launch_container_open_files"
CACHES = "test_launch_container.py::test_launch_container_caches_writable"
IMAGE_ONLY = ("-m", "preflight and image")


def _max_model_len(plan, value: str) -> None:
    flags = plan["engine"]["flags"]
    flags[flags.index("--max-model-len") + 1] = value


def test_a_context_longer_than_the_kv_cache_is_red_on_every_rank(engine_lab, pytester, tmp_path):
    plan = with_plan(tmp_path, lambda p: _max_model_len(p, "131072"))
    run = run_suite(pytester, *HOST_ONLY, inventory=plan)
    assert run.red() == on(KV, *NODES), run.output
    text = run.message(f"{KV}[node2]")
    assert "node2 (10.251.0.12)" in text
    # SmolLM2: 15 of its 30 layers per stage (PP 2), 3 KV heads of 64, bf16: 11520 B a token
    assert "found 93206 tokens fit one rank's KV cache (VLLM_CPU_KVCACHE_SPACE=1 GiB" in text
    assert "planned 131072 tokens (--max-model-len 131072)" in text


def test_a_dockerd_default_ulimit_is_red_on_its_node_only(engine_lab, pytester):
    engine_lab.apply_fault("docker-ulimit", "node2", "1024")
    run = run_suite(pytester, *IMAGE_ONLY)
    assert run.red() == on(OPEN_FILES, "node2"), run.output
    text = run.message(f"{OPEN_FILES}[node2]")
    assert "node2 (10.251.0.12)" in text
    assert "open files 1024 soft, 1024 hard in the launch's container" in text
    assert "--ulimit nofile=1048576:1048576" in text


def test_a_read_only_cache_is_red_on_its_node_only(engine_lab, pytester):
    engine_lab.apply_fault("cache-readonly", "node1", "/root/.cache/vllm")
    run = run_suite(pytester, *IMAGE_ONLY)
    assert run.red() == on(CACHES, "node1"), run.output
    text = run.message(f"{CACHES}[node1]")
    assert "node1 (10.251.0.11)" in text
    assert "VLLM_CACHE_ROOT /root/.cache/vllm not writable by uid 0 (HOME /root)" in text


def test_a_missing_chat_template_is_named_on_its_node(engine_lab, pytester):
    engine_lab.apply_fault("chat-template-missing", "node2", "SmolLM2-135M-Instruct")
    run = run_suite(pytester, *IMAGE_ONLY)
    # the model differs between the nodes now: the parity table shows its digest too
    assert run.red() == on(CHAT, "node2") | {PARITY}, run.output
    text = run.message(f"{CHAT}[node2]")
    assert "node2 (10.251.0.12)" in text
    assert "no chat template: neither tokenizer_config.json's chat_template nor" in text
