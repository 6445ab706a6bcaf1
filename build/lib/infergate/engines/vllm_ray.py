"""vLLM over Ray, as the Spark playbook runs it (NVIDIA/dgx-spark-playbooks nvidia/vllm,
vLLM's run_cluster.sh): a `ray start` container on every node, every node and GPU in
`ray status`, then `vllm serve` with the Ray backend in the head's container."""

from __future__ import annotations

from types import MappingProxyType

from infergate.engines.engine import ImageProbe
from infergate.engines.launch import (
    WEIGHTS_REMEDY,
    ClusterJoined,
    Exec,
    HttpReady,
    Launch,
    Milestone,
    Step,
    deadlines,
    endpoint,
    key_in_env,
    workers,
)
from infergate.engines.ports import API, Bound, PortSpan, is_head
from infergate.engines.signatures import signatures_for
from infergate.engines.vllm import Vllm, vllm_port
from infergate.plan.model import Inventory, Node, plan_key

# Ray's own fixed defaults, which `ray start` does not override here:
# https://docs.ray.io/en/latest/ray-core/configure.html#ports-configurations and
# https://docs.ray.io/en/master/ray-core/internals/port-service-discovery.html
RAY_EVERY_NODE = {52365: Bound("Ray dashboard agent", "")}
RAY_HEAD = {10001: Bound("Ray client server", ""), 8265: Bound("Ray dashboard", "")}
RAY_WORKER_PORTS = PortSpan("Ray worker ports", 10002, 19999)  # --min/--max-worker-port
GCS = Bound("Ray GCS", plan_key("engine.dist_init_port"))


def ray_start(inventory: Inventory, node: Node) -> list[str]:
    """`ray start --block` for one node, advertising its fabric IP (Ray's own pick fails with
    "No available node types", vllm #7815); the plan's dist_init_port is Ray's GCS port, which
    the preflight proves free on the head and reachable from every node."""
    head_ip, own_ip = str(inventory.engine.dist_init_addr), str(node.fabric.address.ip)
    port = str(inventory.engine.dist_init_port)
    if is_head(inventory, node):
        command = ["ray", "start", "--head", "--node-ip-address", head_ip, "--port", port]
    else:
        command = ["ray", "start", "--address", f"{head_ip}:{port}", "--node-ip-address", own_ip]
    gpus = ["--num-gpus", str(node.gpus)] if node.gpus else []
    return [*command, *gpus, "--block"]


def serve_command(inventory: Inventory) -> list[str]:
    """`vllm serve` on the head; Ray places the ranks on the nodes."""
    e = inventory.engine
    model = [inventory.model.path, "--served-model-name", inventory.model.served_name]
    tp = ["--tensor-parallel-size", str(e.tensor_parallel)]
    pp = ["--pipeline-parallel-size", str(e.pipeline_parallel)]
    backend = ["--distributed-executor-backend", "ray"]
    return ["vllm", "serve", *model, *tp, *pp, *backend, "--port", str(e.api_port), *e.flags]


class VllmRay(Vllm):
    kind = "vllm-ray"
    probe = ImageProbe(("vllm", "ray"), "vllm", "vllm_parser", "")
    # on GB10's unified memory the weights are host memory, which Ray's memory monitor would
    # kill workers over; the Spark playbook's run_cluster.sh turns it off too
    container_env = MappingProxyType({"RAY_memory_monitor_refresh_ms": "0"})
    listen_spans = (RAY_WORKER_PORTS,)  # every node's workers

    def planned_ports(self, inventory: Inventory, node: Node) -> dict[int, Bound]:
        """A fixed VLLM_PORT and Ray's dashboard agent on every node; on the head Ray's
        client server and dashboard, its GCS (`ray start --head --port`) and the API."""
        ports = {**vllm_port(inventory, node), **RAY_EVERY_NODE}
        if is_head(inventory, node):
            e = inventory.engine
            ports |= {**RAY_HEAD, e.api_port: API, e.dist_init_port: GCS}
        return ports

    def plan_launch(self, inventory: Inventory, run_id: str) -> Launch:
        inventory = key_in_env(inventory)  # VLLM_API_KEY, not `--api-key` in every `ps`
        head = self.start(inventory, inventory.head, run_id, ray_start(inventory, inventory.head))
        joins = [
            self.start(inventory, n, run_id, ray_start(inventory, n)) for n in workers(inventory)
        ]
        d = deadlines(inventory)
        steps: list[Step] = [
            head,
            Milestone("ray head up", r"Ray runtime started", (head.node,), d.cluster_join),
            # workers only after the head is up: started together they race (ray #59778)
            *joins,
            # every node and GPU, not just a head that answers (docs/internals.md#ray-launch)
            ClusterJoined(
                "every node in ray status",
                head.node,
                ("ray", "status"),
                len(inventory.nodes),
                sum(n.gpus for n in inventory.nodes),
                d.cluster_join,
            ),
            Exec(head.node, head.container, tuple(serve_command(inventory))),
            # Ray forwards the workers' output to the driver: the head's log has every rank's
            Milestone(
                "weights loaded",
                r"Loading weights took|Model loading took",
                (head.node,),
                d.weights,
                WEIGHTS_REMEDY,
            ),
            Milestone("server ready", r"Application startup complete", (head.node,), d.ready),
            HttpReady("API ready", ("/health", "/v1/models"), d.ready),
        ]
        containers = {s.node: s.container for s in (head, *joins)}
        served, fatal = inventory.model.served_name, signatures_for(self.kind)
        return Launch(
            self.kind, run_id, endpoint(inventory), served, containers, tuple(steps), fatal
        )
