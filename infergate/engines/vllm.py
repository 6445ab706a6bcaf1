"""vLLM, however its ranks are launched (vllm_mp.py, vllm_ray.py): what its image, flags,
pinning and KV cache are, and the fixed VLLM_PORT its ranks bind."""

from __future__ import annotations

from abc import ABC

from infergate.engines.engine import Engine, ImageProbe
from infergate.engines.ports import Bound
from infergate.plan.model import Inventory, Node


class Vllm(Engine, ABC):
    """vLLM's own facts, the same whichever backend launches its ranks."""

    package = "vllm"
    # SGLang's flags
    foreign_flags = frozenset(
        {
            "--mem-fraction-static",
            "--tp-size",
            "--tp",
            "--dist-init-addr",
            "--model-path",
            "--context-length",
            "--chunked-prefill-size",
            "--nccl-port",
            "--dist-timeout",
        }
    )
    foreign_owner = "SGLang"
    host_ip_var = "VLLM_HOST_IP"
    memory_flag = "--gpu-memory-utilization"
    memory_default = 0.9  # its default (vLLM's CacheConfig)
    context_flag = "--max-model-len"
    # vllm/v1/worker/cpu_worker.py determine_available_memory returns cpu_kvcache_space_bytes
    cpu_kv_env = "VLLM_CPU_KVCACHE_SPACE"
    no_cpu_kv_budget = (
        "no VLLM_CPU_KVCACHE_SPACE in its env to size vLLM's CPU KV cache (the "
        "engine sizes it itself)"
    )
    probe = ImageProbe(("vllm",), "vllm", "vllm_parser", "")
    health_issue = (
        "vllm#11996, https://github.com/vllm-project/vllm/issues/11996: /health does not see "
        "a dead worker"
    )
    liveness_probe = (
        "probe with a short generation (POST /v1/completions, max_tokens 1, a deadline of a "
        "few s) or watch every rank's container and processes"
    )


def vllm_port(inventory: Inventory, node: Node) -> dict[int, Bound]:
    """A fixed VLLM_PORT in NODE's env: vLLM's first internal (ZMQ, torch) port, every rank's."""
    port = inventory.node_env(node).get("VLLM_PORT", "")
    return {int(port): Bound("VLLM_PORT", node.key_of("env.VLLM_PORT"))} if port.isdigit() else {}
