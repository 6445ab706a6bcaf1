"""Judges of what the plan names (containers, image, ports, pinning, memory balance) on
outputs recorded from the lab (selftest/data/README.md) and on the shipped inventories."""

import dataclasses
import re
import shlex
from ipaddress import IPv4Network
from pathlib import Path

import pytest
import yaml

from infergate.checks.containers import Container, check_foreign_containers
from infergate.checks.facts import (
    containers_of,
    image_id_of,
    interfaces_of,
    listening_of,
    rdma_devices_of,
)
from infergate.checks.image import check_image_parity
from infergate.checks.memory import GIB, check_tp_balance
from infergate.checks.pinning import check_pinning, check_pinning_planned, required_pinning
from infergate.checks.ports import check_ports_free, parse_ss_listening
from infergate.checks.probe import parse_sections
from infergate.deploy.starting import start_remedy
from infergate.engines.labels import RUN_LABEL
from infergate.engines.ports import Bound
from infergate.engines.registry import engine_for
from infergate.plan.model import parse_inventory

DATA = Path(__file__).parents[1] / "data"
INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
LAB = parse_inventory(yaml.safe_load((INVENTORIES / "lab.yaml").read_text()))
SPARKS = parse_inventory(yaml.safe_load((INVENTORIES / "two-sparks-sglang.yaml").read_text()))
FABRIC = IPv4Network("10.252.0.0/24")
API = Bound("API server", "engine.api_port")
DIST = Bound("dist-init rendezvous", "engine.dist_init_port")
NODE1 = LAB.nodes[0]


def sections(case: str, node: str):
    return parse_sections((DATA / "lab" / f"{case}-{node}-probe.txt").read_text())


def test_leftover_container_is_named_with_image_and_memory():
    running, memory = containers_of(sections("foreign-container", "node2"))
    (problem,) = check_foreign_containers(running, memory, allowed=())
    assert problem.found.startswith("container leftover-embeddings (image iglab/busybox, Up ")
    assert "holding 1.0 GiB) running" in problem.found
    assert "docker stop leftover-embeddings" in problem.remedy


def test_allowed_and_own_containers_pass():
    running, memory = containers_of(sections("foreign-container", "node2"))
    assert check_foreign_containers(running, memory, allowed=("leftover-*",)) == []
    ours = Container("engine-node1", "img", {RUN_LABEL: "abc"}, "Up")
    assert check_foreign_containers([ours], {}, allowed=(), run_id="abc") == []
    (other,) = check_foreign_containers([ours], {}, allowed=(), run_id="def")
    assert "of infergate run abc" in other.found


def test_healthy_lab_has_no_containers():
    assert containers_of(sections("healthy", "node1")) == ([], {})


def test_image_missing_everywhere_says_build_then_copy():
    ids = {n: image_id_of(sections("healthy", n)) for n in ("node1", "node2")}
    assert ids == {"node1": None, "node2": None}
    problems = check_image_parity("img:1", ids, LAB.nodes, planned=None)
    assert set(problems) == {"node1", "node2"}
    assert "build or pull img:1" in problems["node1"][0].remedy


def test_image_missing_on_one_node_gives_the_copy_command():
    ids = {"node1": "sha256:" + "a" * 64, "node2": None}
    problems = check_image_parity("img:1", ids, LAB.nodes, planned=None)
    (problem,) = problems["node2"]
    assert problem.found == "image img:1 missing"
    keys = "/var/lib/infergate-lab/ssh"
    lab = f"-i {keys}/id_ed25519 -o UserKnownHostsFile={keys}/known_hosts"
    assert problem.remedy == (
        f"ssh -p 22 {lab} root@10.251.0.11 'docker save img:1' | "
        f"ssh -p 22 {lab} root@10.251.0.12 'docker load'"
    )


def test_image_copy_reaches_spark2_through_spark1_as_the_plan_does():
    """The remedy's ssh goes where the suite's does: the jump host, the user, the port, the key."""
    ids = {"spark1": "sha256:" + "a" * 64, "spark2": None}
    (problem,) = check_image_parity("lmsysorg/sglang:spark", ids, SPARKS.nodes, None)["spark2"]
    assert problem.remedy == (
        "ssh -p 22 aurora@10.1.230.180 'docker save lmsysorg/sglang:spark' | "
        "ssh -p 22 -J aurora@10.1.230.180:22 aurora@192.168.200.13 'docker load'"
    )


def test_image_copy_quotes_every_plan_value():
    """A key path with a space stays one word; the command is pasteable as it is."""
    spark2 = SPARKS.nodes[1]
    odd = dataclasses.replace(spark2, ssh=dataclasses.replace(spark2.ssh, key="/keys/my key"))
    ids = {"spark1": "sha256:" + "a" * 64, "spark2": None}
    (problem,) = check_image_parity("img:1", ids, (SPARKS.nodes[0], odd), None)["spark2"]
    _, load = problem.remedy.split(" | ")
    assert shlex.split(load) == [
        "ssh",
        "-p",
        "22",
        "-i",
        "/keys/my key",
        "-J",
        "aurora@10.1.230.180:22",
        "aurora@192.168.200.13",
        "docker load",
    ]


def test_a_launch_without_the_image_says_how_to_load_it_through_the_jump_host():
    said = "Unable to find image 'x:1' locally"
    remedy = start_remedy(said, SPARKS.nodes[1])
    load = "ssh -p 22 -J aurora@10.1.230.180:22 aurora@192.168.200.13 'docker load'"
    assert f"`docker save IMAGE | {load}`" in remedy


def test_image_with_another_id_than_planned_is_named():
    good, other = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    problems = check_image_parity("img:1", {"node1": good, "node2": other}, LAB.nodes, good)
    assert list(problems) == ["node2"]
    assert problems["node2"][0].found == f"image img:1 with ID {other}"


def test_taken_port_is_named_with_its_process():
    listening = listening_of(sections("port-taken", "node1"))
    (problem,) = check_ports_free(listening, {8000: API, 29501: DIST})
    assert problem.found.startswith("TCP 8000 (API server) already taken on 0.0.0.0 by ")
    assert '"python3",pid=' in problem.found
    pid = re.search(r"pid=(\d+)", problem.found)[1]
    assert problem.remedy.startswith(
        f"python3 (pid {pid}) holds it: see it with `ps -o pid,user,etime,args -p {pid}`, "
        f"stop it (`kill {pid}`)"
    )


def test_port_published_by_a_container_says_stop_the_container():
    # a published `sudo ss -lnpt | grep docker` on a Rocky Linux host running `-p 9999:...`
    line = 'LISTEN 0      4096         0.0.0.0:9999      0.0.0.0:*    users:(("docker-proxy",pid=5538,fd=4))'  # noqa: E501
    (problem,) = check_ports_free(parse_ss_listening(line), {9999: API})
    assert problem.remedy.startswith("a container publishes it: `docker ps --filter publish=9999`")


def test_port_without_a_process_asks_ss_as_root():
    line = "LISTEN 0 128 0.0.0.0:8000 0.0.0.0:*"  # ss without the privilege to show users
    (problem,) = check_ports_free(parse_ss_listening(line), {8000: API})
    assert problem.remedy.startswith("`sudo ss -ltnp 'sport = :8000'`")


def test_free_ports_pass_on_a_healthy_head():
    listening = listening_of(sections("healthy", "node1"))
    assert [s.port for s in listening] == [22]
    assert check_ports_free(listening, {8000: API, 29501: DIST}) == []


def test_lab_env_pinning_holds_on_its_nodes():
    for node in LAB.nodes:
        seen = sections("healthy", node.name)
        problems = check_pinning(
            LAB.node_env(node), interfaces_of(seen), FABRIC, rdma_devices_of(seen), node
        )
        assert problems == []


def test_wrong_gloo_interface_is_named_with_what_exists():
    seen = sections("healthy", "node1")
    env = {"GLOO_SOCKET_IFNAME": "eth0"}
    (problem,) = check_pinning(env, interfaces_of(seen), FABRIC, set(), NODE1)
    assert problem.found == "GLOO_SOCKET_IFNAME=eth0: no interface eth0 (present: fab0, lo, mgmt0)"


def test_pinning_to_the_management_interface_is_off_the_fabric():
    seen = sections("healthy", "node1")
    env = {"GLOO_SOCKET_IFNAME": "mgmt0", "VLLM_HOST_IP": "10.251.0.11"}
    problems = check_pinning(env, interfaces_of(seen), FABRIC, set(), NODE1)
    assert [p.found for p in problems] == [
        "GLOO_SOCKET_IFNAME=mgmt0: mgmt0 has no address in 10.252.0.0/24",
        "VLLM_HOST_IP=10.251.0.11: not in the fabric 10.252.0.0/24",
    ]


def test_nccl_prefix_match_and_exclusion_lists():
    seen = sections("healthy", "node1")
    ifaces = interfaces_of(seen)
    assert check_pinning({"NCCL_SOCKET_IFNAME": "fab"}, ifaces, FABRIC, set(), NODE1) == []
    assert check_pinning({"NCCL_SOCKET_IFNAME": "^lo,docker"}, ifaces, FABRIC, set(), NODE1) == []
    (problem,) = check_pinning({"NCCL_SOCKET_IFNAME": "=fab"}, ifaces, FABRIC, set(), NODE1)
    assert "no interface fab" in problem.found


def test_spark_needs_both_twin_hcas():
    spark = SPARKS.nodes[0]
    env = {"NCCL_IB_HCA": "rocep1s0f1"}
    present = {"rocep1s0f1", "roceP2p1s0f1"}
    (problem,) = check_pinning(env, {}, FABRIC, present, spark)
    assert problem.found == "NCCL_IB_HCA=rocep1s0f1 leaves out roceP2p1s0f1"
    assert "~3 GB/s instead of ~24" in problem.remedy


def test_absent_hca_is_named():
    (problem,) = check_pinning({"NCCL_IB_HCA": "mlx5_0:1"}, {}, FABRIC, set(), NODE1)
    assert problem.found == "NCCL_IB_HCA=mlx5_0:1: no RDMA device mlx5_0 (present: none)"


@pytest.mark.parametrize(
    ("plan", "needed"),
    [
        (LAB, ("GLOO_SOCKET_IFNAME", "VLLM_HOST_IP")),
        (SPARKS, ("GLOO_SOCKET_IFNAME", "SGLANG_HOST_IP", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA")),
    ],
    ids=["lab", "sparks"],
)
def test_shipped_plans_pin_what_their_engine_needs(plan, needed):
    gpus = any(n.gpus for n in plan.nodes)
    rdma = any(n.fabric.hcas for n in plan.nodes)
    assert required_pinning(engine_for(plan), gpus, rdma) == needed
    assert check_pinning_planned(plan.node_env(plan.nodes[0]), needed) == []


def test_seeds_plan_without_pinning_is_named():
    (problem,) = check_pinning_planned({}, ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"))
    assert problem.found == "engine.env lacks GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME"


def test_leftover_12_gb_on_one_spark_breaks_sglangs_balance_rule():
    # an idle Spark has ~113 GiB available (docs/notes.md#sizing); the report's leftover: 12 GB
    usable = {"spark1": 113 * GIB, "spark2": 101 * GIB}
    (problem,) = check_tp_balance(usable, 0.9)["spark2"]
    assert problem.found == "101.0 GiB usable, 0.89 of spark1's 113.0 GiB"
    assert "memory capacity is unbalanced" in problem.planned
    assert check_tp_balance({"spark1": 113 * GIB, "spark2": 110 * GIB}, 0.9) == {}
