"""The lab's pure parts for its two modes (sshd and dockerd on every node, or sshd only): how
many nodes each allows, the addresses and names of the largest lab, what each node runs, how
status judges a node, and the kernel's neighbour table raised for a large lab (on files of
the test's own). No lab needed."""

from __future__ import annotations

import json
from dataclasses import asdict
from ipaddress import IPv4Network, ip_address

import pytest
import yaml

from infergate_lab import layout as L
from infergate_lab import net, render_inventory
from infergate_lab.services import node_services
from infergate_lab.state import LabState, load
from infergate_lab.status import NodeStatus, table

IFNAMSIZ = 15  # a Linux interface name's longest, without its NUL


@pytest.mark.parametrize(("docker", "most"), [(True, 16), (False, 244)])
def test_node_count_is_bounded_by_docker_or_by_the_address_plan(docker, most):
    assert len(L.node_specs(most, docker)) == most
    for wrong in (0, most + 1):
        with pytest.raises(ValueError, match=f"1 to {most} nodes"):
            L.node_specs(wrong, docker)


def test_the_largest_lab_keeps_its_addresses_in_their_24s_and_its_names_short():
    specs = L.node_specs(L.MAX_SSHD_ONLY_NODES, docker=False)
    mgmt, fabric = IPv4Network("10.251.0.0/24"), IPv4Network("10.252.0.0/24")
    host = ip_address(L.MGMT_HOST_ADDR.split("/")[0])
    assert all(ip_address(s.mgmt_ip) in mgmt and s.mgmt_ip != str(host) for s in specs)
    assert all(ip_address(s.fabric_ip) in fabric for s in specs)
    assert specs[-1].mgmt_ip == "10.251.0.254"  # below the broadcast address
    for addresses in ({s.mgmt_ip for s in specs}, {s.fabric_ip for s in specs}):
        assert len(addresses) == len(specs)
    assert max(len(n) for s in specs for n in (s.host_veth, s.fabric_veth)) <= IFNAMSIZ


def test_every_node_of_an_sshd_only_lab_is_named_back_to_its_spec():
    assert L.spec_named("node128") == L.NodeSpec(128)
    with pytest.raises(ValueError, match=r"node1\.\.node244"):
        L.spec_named("node245")


def test_the_inventory_of_128_nodes_names_each_once_with_node1_the_head():
    plan = yaml.safe_load(render_inventory(128))
    names = [n["name"] for n in plan["nodes"]]
    assert names == [f"node{i}" for i in range(1, 129)]
    assert plan["nodes"][0]["roles"] == ["head"]


def test_a_node_runs_dockerd_only_in_a_lab_with_docker():
    assert node_services(docker=True) == ("sshd", "dockerd")
    assert node_services(docker=False) == ("sshd",)


def test_a_state_file_from_before_the_modes_is_a_lab_with_docker(tmp_path):
    path = tmp_path / "state.json"
    data = asdict(LabState(6.0))
    del data["docker"]
    path.write_text(json.dumps(data))
    state = load(path)
    assert state is not None
    assert state.docker


def status(docker: bool, dockerd: bool) -> NodeStatus:
    pids = {"sshd": 11, **({"dockerd": 12} if dockerd else {})}
    return NodeStatus("node1", "10.251.0.11", True, True, True, docker, dockerd, dockerd, (), pids)


def test_an_sshd_only_node_is_healthy_without_dockerd_and_shows_no_engine():
    sshd_only = status(docker=False, dockerd=False)
    assert sshd_only.healthy
    assert table([sshd_only]).splitlines()[1].split() == [
        "node1",
        "10.251.0.11",
        "ok",
        "11",
        "ok",
        "-",
        "-",
        "-",
    ]


def test_a_node_of_a_docker_lab_without_dockerd_is_not_healthy():
    assert status(docker=True, dockerd=True).healthy
    broken = status(docker=True, dockerd=False)
    assert not broken.healthy
    assert table([broken]).splitlines()[1].split()[5:7] == ["DOWN", "DOWN"]


DEFAULTS = {
    "ipv4/neigh/default/gc_thresh1": 128,
    "ipv4/neigh/default/gc_thresh2": 512,
    "ipv4/neigh/default/gc_thresh3": 1024,
    "core/netdev_max_backlog": 1000,
}


@pytest.fixture
def sysctls(tmp_path, monkeypatch):
    """The kernel settings a large lab raises, as files of their own at the kernel's
    defaults; the state is not saved (its file is the machine's lab's)."""
    monkeypatch.setattr(L, "SYSCTL_DIR", tmp_path)
    monkeypatch.setattr(LabState, "save", lambda self, path=None: None)
    for key, value in DEFAULTS.items():
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_text(f"{value}\n")
    return lambda: {key: int((tmp_path / key).read_text()) for key in DEFAULTS}


def test_a_lab_of_16_leaves_the_kernel_as_it_is(sysctls):
    state = LabState(6.0)
    net.ensure_kernel_room(state, 16)  # 272 ARP entries
    assert sysctls() == DEFAULTS
    assert state.sysctls == {}


def test_a_lab_of_128_raises_the_kernels_limits_and_2_nodes_restore_them(sysctls):
    state = LabState(6.0)
    net.ensure_kernel_room(state, 64)
    net.ensure_kernel_room(state, 128)  # 16,512 ARP entries
    assert list(sysctls().values()) == [16512, 33024, 66048, 16256]
    assert state.sysctls == {key: str(value) for key, value in DEFAULTS.items()}
    net.ensure_kernel_room(state, 2)
    assert sysctls() == DEFAULTS
    assert state.sysctls == {}
