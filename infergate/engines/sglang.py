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
# its own sys.argv, which `ps` and /proc/PID/cmdline never show
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
    model = ["--model-path", inventory.model.path]
    served = ["--served-model-name", inventory.model.served_name]
    command = ["python3", *launcher, *model, *served, "--tp", str(e.tensor_parallel)]
    if e.pipeline_parallel > 1:
        command += ["--pp-size", str(e.pipeline_parallel)]
    dist_init = ["--dist-init-addr", f"{e.dist_init_addr}:{e.dist_init_port}"]
    nodes = ["--nnodes", str(len(inventory.nodes)), "--node-rank", str(rank)]
    command += [*dist_init, *nodes, "--host", "0.0.0.0", "--port", str(e.api_port)]
    return [*command, *e.flags]


class SGLang(Engine):
    kind = "sglang"
    package = "sglang"
    # vLLM's flags; not --tensor-parallel-size or --pipeline-parallel-size, which SGLang takes
    # as aliases (docs/internals.md#foreign-flags)
    foreign_flags = frozenset(
        {
            "--language-model-only",
            "--gpu-memory-utilization",
            "--enforce-eager",
            "--max-model-len",
            "--master-addr",
            "--headless",
            "--distributed-executor-backend",
            "--max-num-seqs",
        }
    )
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
    health_issue = (
        "sglang#4780, https://github.com/sgl-project/sglang/issues/4780: the head does not "
        "see a worker node stop"
    )
    liveness_probe = (
        "probe GET /health_generate, which generates through every rank, with a deadline of "
        "a few s, or watch every rank's container and processes"
    )
    answers_by_design = MappingProxyType(
        {
            "unknown-model": "SGLang serves any model name with its one model: its OpenAI layer "
            "reads `model` only for a LoRA adapter's name (entrypoints/openai/serving_base.py, "
            "0.5.23; the lab's SGLang answered 200)",
        }
    )

    def planned_ports(self, inventory: Inventory, node: Node) -> dict[int, Bound]:
        """Every rank's `--port` (rank 0's API; the others' health check, SGLang's
        launch_dummy_health_check_server) and the head's dist-init store."""
        e = inventory.engine
        ports = {e.api_port: API}
        return ports | ({e.dist_init_port: DIST_INIT} if is_head(inventory, node) else {})

    def plan_launch(self, inventory: Inventory, run_id: str) -> Launch:
        inventory = key_in_env(inventory, KEY_ENV)  # not `--api-key` in every `ps`
        nodes = ordered(inventory)
        starts = [
            self.start(inventory, n, run_id, server_command(inventory, rank))
            for rank, n in enumerate(nodes)
        ]
        d = deadlines(inventory)
        every, head = names(nodes), (inventory.head.name,)
        steps: list[Step] = [
            *starts,
            # the log lines of SGLang 0.5.20 to 0.5.23 (docs/internals.md#sglang-milestones)
            Milestone(
                "distributed init",
                r"Init (torch distributed|parallel) ends\.",
                every,
                d.dist_init,
                DIST_INIT_REMEDY,
                began=(r"Init (torch distributed|parallel) begin\.", INIT_BEGAN_REMEDY),
            ),
            Milestone("weights loaded", r"Load weight end", every, d.weights, WEIGHTS_REMEDY),
            Milestone(
                "server ready",
                r"The server is fired up and ready to roll|Uvicorn running",
                head,
                d.ready,
            ),
            # rank 0's /health_generate generates through every rank; a rank >= 1 serves a
            # dummy /health that always answers 200 (docs/internals.md#sglang-milestones)
            HttpReady("API ready", ("/health_generate", "/v1/models"), d.ready),
        ]
        containers = {s.node: s.container for s in starts}
        served, fatal = inventory.model.served_name, signatures_for(self.kind)
        return Launch(
            self.kind, run_id, endpoint(inventory), served, containers, tuple(steps), fatal
        )
