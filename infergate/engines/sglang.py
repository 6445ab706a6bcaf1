"""SGLang across nodes: the same `sglang.launch_server` command on every node, one
`--dist-init-addr` (rank 0's fabric address) and each node's own `--node-rank`; only rank 0
serves HTTP (SGLang's docs/references/multi_node_deployment/multi_node.md)."""

from __future__ import annotations

from types import MappingProxyType

from infergate.engines.engine import Engine, ImageProbe
from infergate.engines.launch import (
    DIST_INIT_REMEDY,
    INIT_BEGAN_REMEDY,
    WEIGHTS_REMEDY,
    HttpReady,
    Launch,
    Milestone,
    Step,
    deadlines,
    endpoint,
    key_in_env,
    names,
    ordered,
)
from infergate.engines.ports import API, DIST_INIT, Bound, is_head
from infergate.engines.signatures import signatures_for
from infergate.plan.model import Inventory, Node

# SGLang reads its key from `--api-key` only: the launcher appends it from this variable to
# its own sys.argv, which the process's argv (`ps`, /proc/PID/cmdline) never shows
KEY_ENV = "SGLANG_API_KEY"
_KEYED = (
    "import os, runpy, sys; sys.argv += ['--api-key', os.environ.pop('SGLANG_API_KEY')]; "
    "runpy.run_module('sglang.launch_server', run_name='__main__', alter_sys=True)"
)


def server_command(inventory: Inventory, rank: int) -> list[str]:
    """`sglang.launch_server` for one rank: identical on every node but `--node-rank`
    (every rank binds its `--port`: planned_ports)."""
    e = inventory.engine
    launcher = ["-c", _KEYED] if KEY_ENV in e.env else ["-m", "sglang.launch_server"]
    command = ["python3", *launcher, "--model-path", inventory.model.path,
               "--served-model-name", inventory.model.served_name,
               "--tp", str(e.tensor_parallel)]  # fmt: skip
    if e.pipeline_parallel > 1:
        command += ["--pp-size", str(e.pipeline_parallel)]
    command += ["--dist-init-addr", f"{e.dist_init_addr}:{e.dist_init_port}",
                "--nnodes", str(len(inventory.nodes)), "--node-rank", str(rank),
                "--host", "0.0.0.0", "--port", str(e.api_port)]  # fmt: skip
    return [*command, *e.flags]


class SGLang(Engine):
    kind = "sglang"
    package = "sglang"
    # vLLM's; --language-model-only was rejected by the SGLang of the two-Spark report
    # (docs/notes.md#two-spark-report), 0.5.23 takes it; SGLang takes --tensor-parallel-size
    # and --pipeline-parallel-size as aliases of its own
    foreign_flags = frozenset({
        "--language-model-only", "--gpu-memory-utilization", "--enforce-eager",
        "--max-model-len", "--master-addr", "--headless", "--distributed-executor-backend",
        "--max-num-seqs",
    })  # fmt: skip
    foreign_owner = "vLLM"
    host_ip_var = "SGLANG_HOST_IP"
    memory_flag = "--mem-fraction-static"
    memory_default = 0.9  # picked by the GPU's size, at most about this (server_args.py)
    context_flag = "--context-length"
    cpu_kv_env = None
    no_cpu_kv_budget = (
        "SGLang on CPU sizes its KV cache itself (--max-total-tokens, else from the node's memory)"
    )
    probe = ImageProbe(("sglang",), "sglang.srt.models.registry", "sglang_parser", "--model-path")
    metrics_hint = "SGLang serves /metrics only with --enable-metrics in engine.flags"
    answers_by_design = MappingProxyType({
        "unknown-model": "SGLang serves any model name with its one model: its OpenAI layer "
        "reads `model` only for a LoRA adapter's name (entrypoints/openai/serving_base.py, "
        "0.5.23; the lab's SGLang answered 200)",
    })  # fmt: skip

    def planned_ports(self, inventory: Inventory, node: Node) -> dict[int, Bound]:
        """Every rank's `--port` (rank 0's API; the others' health check, SGLang's
        launch_dummy_health_check_server) and the head's dist-init store."""
        e = inventory.engine
        ports = {e.api_port: API}
        return ports | ({e.dist_init_port: DIST_INIT} if is_head(inventory, node) else {})

    def plan_launch(self, inventory: Inventory, run_id: str) -> Launch:
        inventory = key_in_env(inventory, KEY_ENV)  # not `--api-key` in every `ps`
        nodes = ordered(inventory)
        starts = [self.start(inventory, n, run_id, server_command(inventory, rank))
                  for rank, n in enumerate(nodes)]  # fmt: skip
        d = deadlines(inventory)
        every, head = names(nodes), (inventory.head.name,)
        steps: list[Step] = [
            *starts,
            # python/sglang/srt/distributed/bootstrap.py logs the end of process-group set-up
            # as "Init torch distributed ends." up to 0.5.20 and "Init parallel ends." from
            # 0.5.21 on (read in the 0.5.20, 0.5.21 and 0.5.23 wheels); model_runner.py logs
            # "Load weight end." in all three
            Milestone("distributed init", r"Init (torch distributed|parallel) ends\.", every,
                      d.dist_init, DIST_INIT_REMEDY,
                      began=(r"Init (torch distributed|parallel) begin\.", INIT_BEGAN_REMEDY)),
            Milestone("weights loaded", r"Load weight end", every, d.weights, WEIGHTS_REMEDY),
            Milestone("server ready",
                      r"The server is fired up and ready to roll|Uvicorn running", head,
                      d.ready),
            # Rank 0 only, and not /health on rank >= 1: there SGLang runs a dummy server
            # whose /health and /health_generate always answer 200, started once that node's
            # own schedulers are up, whatever rank 0 does (engine.py's
            # launch_dummy_health_check_server after wait_for_ready, read in 0.5.20 and
            # 0.5.23). /health_generate on rank 0 generates a token through every rank.
            HttpReady("API ready", ("/health_generate", "/v1/models"), d.ready),
        ]  # fmt: skip
        containers = {s.node: s.container for s in starts}
        return Launch(self.kind, run_id, endpoint(inventory), inventory.model.served_name,
                      containers, tuple(steps), signatures_for(self.kind))  # fmt: skip
