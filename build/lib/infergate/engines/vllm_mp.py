"""vLLM with its own multiprocessing backend across nodes: the head serves the API with
`--node-rank 0`, every other node runs the same command with `--headless` (vLLM's
parallelism_scaling docs; the 2x GB10 recipe, vllm-project/recipes PR 414)."""

from __future__ import annotations

from infergate.engines.launch import (
    DIST_INIT_REMEDY,
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
from infergate.engines.vllm import Vllm, vllm_port
from infergate.plan.model import Inventory, Node


def serve_command(inventory: Inventory, node: Node, rank: int) -> list[str]:
    """`vllm serve` for one node: the same parallel layout on every node, the API on
    the head only (planned_ports)."""
    e = inventory.engine
    model = [inventory.model.path, "--served-model-name", inventory.model.served_name]
    tp = ["--tensor-parallel-size", str(e.tensor_parallel)]
    pp = ["--pipeline-parallel-size", str(e.pipeline_parallel)]
    nodes = ["--nnodes", str(len(inventory.nodes)), "--node-rank", str(rank)]
    master = ["--master-addr", str(e.dist_init_addr), "--master-port", str(e.dist_init_port)]
    backend = ["--distributed-executor-backend", "mp"]
    command = ["vllm", "serve", *model, *tp, *pp, *backend, *nodes, *master]
    command += ["--port", str(e.api_port)] if is_head(inventory, node) else ["--headless"]
    return [*command, *e.flags]


class VllmMp(Vllm):
    kind = "vllm"

    def planned_ports(self, inventory: Inventory, node: Node) -> dict[int, Bound]:
        """A fixed VLLM_PORT on every rank; the API (`--port`) and the dist-init store
        (`--master-port`) on the head, the others run `--headless`."""
        ports = vllm_port(inventory, node)
        if is_head(inventory, node):
            e = inventory.engine
            ports |= {e.api_port: API, e.dist_init_port: DIST_INIT}
        return ports

    def plan_launch(self, inventory: Inventory, run_id: str) -> Launch:
        inventory = key_in_env(inventory)  # VLLM_API_KEY, not `--api-key` in every `ps`
        nodes = ordered(inventory)
        starts = [
            self.start(inventory, n, run_id, serve_command(inventory, n, rank))
            for rank, n in enumerate(nodes)
        ]
        d = deadlines(inventory)
        every, head = names(nodes), (inventory.head.name,)
        steps: list[Step] = [
            *starts,
            # each rank's worker logs its place once torch.distributed is up
            Milestone(
                "distributed init",
                r"rank \d+ in world size \d+ is assigned as",
                every,
                d.dist_init,
                DIST_INIT_REMEDY,
            ),
            Milestone(
                "weights loaded",
                r"Loading weights took|Model loading took",
                every,
                d.weights,
                WEIGHTS_REMEDY,
            ),
            Milestone("server ready", r"Application startup complete", head, d.ready),
            HttpReady("API ready", ("/health", "/v1/models"), d.ready),
        ]
        containers = {s.node: s.container for s in starts}
        served, fatal = inventory.model.served_name, signatures_for(self.kind)
        return Launch(
            self.kind, run_id, endpoint(inventory), served, containers, tuple(steps), fatal
        )
