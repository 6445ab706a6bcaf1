"""The lab is as real as a machine can be here: each node answers SSH under its own host key
and hostname, runs its own Docker engine, reaches the others over the fabric only, and every
fault has its real effect until cleared. No mocks: these make and break the lab for real."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from infergate.plan.model import parse_inventory
from infergate_lab import Lab, LabError, render_inventory

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
NODES = ("node1", "node2")
GIB = 2**30


def fabric_ping(lab: Lab, node: str, address: str) -> bool:
    argv = ["ping", "-c", "2", "-i", "0.2", "-W", "1", address]
    return lab.node_exec(node, argv, check=False).returncode == 0


def docker_id(lab: Lab, node: str) -> str:
    """The engine ID a plain `docker` reports over SSH (DOCKER_HOST comes from sshd)."""
    done = lab.ssh(node, ["docker", "info", "--format", "{{.ID}}"])
    return done.stdout.strip() if done.returncode == 0 else ""


def fab0_mtu(lab: Lab, node: str) -> str:
    return lab.node_exec(node, ["cat", "/sys/class/net/fab0/mtu"]).stdout.strip()


def pids(lab: Lab) -> dict[str, dict[str, int]]:
    return {s.name: dict(s.pids) for s in lab.status()}


def test_up_again_changes_nothing(lab):
    before = pids(lab)
    lab.up(2)
    assert pids(lab) == before
    assert all(s.healthy for s in lab.status()), lab.status()


@pytest.mark.parametrize("name", NODES)
def test_ssh_with_checked_host_key_reaches_node_by_hostname(lab, name):
    done = lab.ssh(name, ["hostname"])
    assert (done.returncode, done.stdout.strip()) == (0, name), done.stderr


def test_each_node_runs_its_own_docker_engine(lab):
    ids = {node: docker_id(lab, node) for node in NODES}
    assert all(ids.values()), ids
    assert len(set(ids.values())) == len(NODES), ids


def test_docker_run_of_a_local_image_runs_inside_the_node(lab):
    image = lab.make_image("node1")
    argv = [
        "docker",
        "run",
        "--rm",
        "--network",
        "host",
        image,
        "sh",
        "-c",
        "hostname; cat /sys/class/net/fab0/mtu",
    ]
    assert lab.node_exec("node1", argv).stdout.split() == ["node1", "1500"]


def test_node_processes_are_in_the_node_memory_cgroup(lab):
    done = lab.ssh("node1", ["grep", ":memory:", "/proc/self/cgroup"])
    assert done.stdout.strip().endswith(":/infergate-lab/node1/system"), done.stdout
    limit = Path("/sys/fs/cgroup/memory/infergate-lab/node1/memory.limit_in_bytes")
    if limit.exists():  # cgroup v1, as on this machine
        assert int(limit.read_text()) == 6 * GIB


def test_nodes_reach_each_other_over_the_fabric_and_the_host_does_not(lab):
    assert fabric_ping(lab, "node1", "10.252.0.12")
    host = subprocess.run(
        ["ping", "-c", "1", "-W", "1", "10.252.0.12"], capture_output=True, timeout=10, check=False
    )
    assert host.returncode != 0


def test_model_dir_is_each_nodes_own(lab):
    probe = "/srv/models/iglab-probe"
    lab.node_exec("node1", ["sh", "-c", f"echo probe > {probe}"])
    try:
        assert lab.node_exec("node2", ["test", "-e", probe], check=False).returncode != 0
        assert not Path(probe).exists()
        assert Path("/var/lib/infergate-lab/nodes/node1/models/iglab-probe").exists()
    finally:
        lab.node_exec("node1", ["rm", "-f", probe])


def test_link_down_cuts_the_fabric_until_cleared(clean_lab):
    clean_lab.apply_fault("link-down", "node2")
    assert not fabric_ping(clean_lab, "node1", "10.252.0.12")
    assert [s.faults for s in clean_lab.status()] == [(), ("link-down",)]
    clean_lab.clear_faults()
    assert fabric_ping(clean_lab, "node1", "10.252.0.12")


def test_mtu_fault_sets_fab0_mtu_until_cleared(clean_lab):
    clean_lab.apply_fault("mtu", "node2", "1400")
    assert (fab0_mtu(clean_lab, "node1"), fab0_mtu(clean_lab, "node2")) == ("1500", "1400")
    clean_lab.clear_faults()
    assert fab0_mtu(clean_lab, "node2") == "1500"


# A server that closes its side first leaves the port in TIME_WAIT, as an engine just removed
# by the previous test does; a stray server still binds it, and so must the fault.
_TIME_WAIT = """
import socket
server = socket.create_server(("127.0.0.1", 18000))
client = socket.create_connection(("127.0.0.1", 18000))
conn, _ = server.accept()
conn.close()
client.recv(1)
client.close()
server.close()
"""


def test_port_fault_takes_a_port_left_in_time_wait(clean_lab):
    clean_lab.node_exec("node1", ["/usr/bin/python3", "-c", _TIME_WAIT])
    waiting = clean_lab.node_exec("node1", ["ss", "-Htan", "state", "time-wait"]).stdout
    assert "127.0.0.1:18000 " in waiting, waiting
    clean_lab.apply_fault("port-taken", "node1", "18000")
    assert ":18000 " in clean_lab.node_exec("node1", ["ss", "-Htln"]).stdout
    clean_lab.clear_faults()
    assert ":18000 " not in clean_lab.node_exec("node1", ["ss", "-Htln"]).stdout


def test_hold_memory_charges_only_that_node(clean_lab):
    before = {n: clean_lab.memory_usage(n) for n in NODES}
    clean_lab.apply_fault("hold-memory", "node1", "1")
    grew = {n: clean_lab.memory_usage(n) - before[n] for n in NODES}
    assert grew["node1"] > 0.95 * GIB, grew
    assert abs(grew["node2"]) < 0.1 * GIB, grew
    clean_lab.clear_faults()
    assert clean_lab.memory_usage("node1") - before["node1"] < 0.1 * GIB


def test_sshd_stop_refuses_port_22_until_cleared(clean_lab):
    clean_lab.apply_fault("sshd-stop", "node2")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("10.251.0.12", 22), timeout=2).close()
    clean_lab.clear_faults()
    done = clean_lab.ssh("node2", ["hostname"])  # the same host key: known_hosts still fits
    assert (done.returncode, done.stdout.strip()) == (0, "node2"), done.stderr


def test_docker_stop_fails_docker_until_cleared(clean_lab):
    engine = docker_id(clean_lab, "node1")
    clean_lab.apply_fault("docker-stop", "node1")
    assert docker_id(clean_lab, "node1") == ""
    assert docker_id(clean_lab, "node2") != ""
    clean_lab.clear_faults()
    assert docker_id(clean_lab, "node1") == engine


def test_foreign_container_holds_memory_on_that_node(clean_lab):
    before = clean_lab.memory_usage("node2")
    clean_lab.apply_fault("foreign-container", "node2", "0.5")
    listed = clean_lab.ssh("node2", ["docker", "ps", "-q"]).stdout.split()
    assert len(listed) == 1
    assert clean_lab.memory_usage("node2") - before > 0.45 * GIB
    clean_lab.clear_faults()
    assert clean_lab.ssh("node2", ["docker", "ps", "-q"]).stdout.split() == []


def test_render_inventory_2_is_the_shipped_lab_yaml_data():
    shipped = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    assert yaml.safe_load(render_inventory(2)) == shipped


def test_render_inventory_2_parses_to_the_shipped_plan():
    shipped = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    assert parse_inventory(yaml.safe_load(render_inventory(2))) == parse_inventory(shipped)


def test_render_inventory_makes_node1_head_and_the_rest_workers():
    plan = yaml.safe_load(render_inventory(3))
    assert [(n["name"], n["roles"]) for n in plan["nodes"]] == [
        ("node1", ["head"]),
        ("node2", ["worker"]),
        ("node3", ["worker"]),
    ]
    assert plan["engine"]["dist_init_addr"] == "10.252.0.11"


def test_up_3_adds_node3_sshd_only_stops_dockerd_and_up_2_removes_node3_cleanly(lab):
    """One round trip through 3 nodes: adding node3 leaves the others alone, the sshd-only
    mode runs no dockerd and brings the same engines back, removing node3 leaves nothing.
    Back to 2 nodes with Docker whatever fails: the session's later tests need that lab."""
    before = pids(lab)
    engine = docker_id(lab, "node1")
    try:
        lab.up(3)
        assert [s.name for s in lab.status() if s.healthy] == ["node1", "node2", "node3"]
        assert fabric_ping(lab, "node1", "10.252.0.13")
        assert lab.ssh("node3", ["hostname"]).stdout.strip() == "node3"
        assert {n: p for n, p in pids(lab).items() if n != "node3"} == before
        lab.up(3, docker=False)
        assert lab.runs_docker() is False
        assert [s.name for s in lab.status() if s.healthy] == ["node1", "node2", "node3"]
        assert [s.pids.keys() for s in lab.status()] == [{"sshd"}] * 3
        assert docker_id(lab, "node1") == ""
        assert lab.ssh("node3", ["hostname"]).stdout.strip() == "node3"
        with pytest.raises(LabError, match="docker-stop needs Docker"):
            lab.apply_fault("docker-stop", "node1")  # its clear would start a dockerd
        lab.up(3)
        assert lab.runs_docker() is True
        assert all(s.healthy for s in lab.status()), lab.status()
        assert docker_id(lab, "node1") == engine  # its data root kept: the same engine, images
        three = pids(lab)
    finally:
        lab.up(2)
    assert pids(lab) == {n: three[n] for n in NODES}
    assert [x for x in lab.leftovers() if "node3" in x or x.endswith("-m3")] == []
    fab3 = ["ip", "-n", "iglab-fabric", "link", "show", "fab3"]
    assert subprocess.run(fab3, capture_output=True, timeout=10, check=False).returncode != 0
    assert not Path("/var/lib/infergate-lab/nodes/node3").exists()
    assert "10.251.0.13" not in Path("/var/lib/infergate-lab/ssh/known_hosts").read_text()


def test_render_inventory_moe_tp_is_the_shipped_second_lab_plan():
    shipped = yaml.safe_load((ROOT / "inventories" / "lab-moe-tp2.yaml").read_text())
    assert yaml.safe_load(render_inventory(2, "moe-tp")) == shipped
