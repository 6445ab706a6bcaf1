"""RDMA port, GID and twin-HCA judges on sysfs forms (selftest/data/rdma/; sources in
selftest/data/README.md) and the shipped two-sparks plans; the probe section itself run on
this machine (no /sys/class/infiniband) and on a sysfs-shaped tree."""

import subprocess
import time
from dataclasses import replace
from ipaddress import IPv4Address
from pathlib import Path

import pytest

from infergate.checks.facts import rdma_ports_of
from infergate.checks.probe import RDMA_PORTS, parse_sections, probe_script
from infergate.checks.rdma import (
    check_rdma,
    check_rdma_ports_active,
    check_roce_v2_gids,
    check_twin_hcas_planned,
    fabric_twins,
)
from infergate.checks.rdma_sysfs import RdmaPlan, parse_nccl_ib_hca, parse_rdma_sysfs, rdma_plan
from infergate.fixtures.inventory import load_inventory

DATA = Path(__file__).parents[1] / "data" / "rdma"
INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
SPARKS = load_inventory(INVENTORIES / "two-sparks-vllm.yaml")
SPARK1, SPARK2 = SPARKS.nodes
MLX5_HOST = RdmaPlan((), "", "", IPv4Address("10.200.1.10"), "gpu1_eth", "nodes[0].fabric.hcas")


def ports(form: str):
    """A recorded form as the probe returns it, read through the facts reader."""
    return rdma_ports_of(parse_sections(f"\n@@@ rdma-ports 0\n{(DATA / form).read_text()}"))


def spark1_plan(**env: str) -> RdmaPlan:
    return rdma_plan(SPARK1, {**SPARKS.node_env(SPARK1), **env})


def test_spark_pair_form_parses_twins_and_gids():
    seen = {p.device: p for p in ports("spark1-healthy.txt")}
    assert sorted(seen) == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]
    fabric = seen["rocep1s0f1"]
    assert (fabric.up, fabric.netdevs, fabric.pci) == (True, ("enp1s0f1np1",), "0000:01:00.1")
    assert [(g.index, g.type, g.text) for g in fabric.gids[2:]] == [
        (2, "IB/RoCE v1", "::ffff:192.168.200.12"),
        (3, "RoCE v2", "::ffff:192.168.200.12"),
    ]
    assert fabric.gids[0].text == "fe80::fe4c:eaff:fef9:4231"
    assert not seen["rocep1s0f0"].up  # the uncabled port: 1: DOWN, 3: Disabled
    assert fabric_twins(list(seen.values()), "enp1s0f1np1") == ["rocep1s0f1", "roceP2p1s0f1"]
    assert fabric_twins(list(seen.values()), "enp1s0f0np0") == ["rocep1s0f0", "roceP2p1s0f0"]


@pytest.mark.parametrize("plan_file", sorted(INVENTORIES.glob("two-sparks-*.yaml")))
def test_healthy_spark_passes_every_shipped_plan(plan_file):
    plan = load_inventory(plan_file)
    spark1 = rdma_plan(plan.nodes[0], plan.node_env(plan.nodes[0]))
    assert check_rdma(ports("spark1-healthy.txt"), spark1) == []


def test_port_down_is_named_with_its_netdev_and_the_command():
    (problem,) = check_rdma(ports("spark1-twin-down.txt"), spark1_plan())
    assert problem.found == "roceP2p1s0f1 port 1 (on enP2p1s0f1np1) is DOWN, Disabled"
    assert "`roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)`" in problem.remedy
    assert "`sudo ip link set enP2p1s0f1np1 up`" in problem.remedy
    assert "cable" in problem.remedy


def test_gid_index_on_a_roce_v1_entry_fails_on_every_hca():
    problems = check_roce_v2_gids(ports("spark1-healthy.txt"), spark1_plan(NCCL_IB_GID_INDEX="2"))
    assert [p.found for p in problems] == [
        "NCCL_IB_GID_INDEX=2, but GID 2 of roceP2p1s0f1 is IB/RoCE v1 ::ffff:192.168.201.12; "
        "its RoCE v2 GID ::ffff:192.168.201.12 is at 3",
        "NCCL_IB_GID_INDEX=2, but GID 2 of rocep1s0f1 is IB/RoCE v1 ::ffff:192.168.200.12; "
        "its RoCE v2 GID ::ffff:192.168.200.12 is at 3",
    ]
    assert "remove NCCL_IB_GID_INDEX" in problems[0].remedy


def test_gid_index_pinned_to_3_fails_on_the_drifted_hca_only():
    drifted = ports("spark1-gid-drift.txt")
    (problem,) = check_rdma(drifted, spark1_plan(NCCL_IB_GID_INDEX="3"))
    assert problem.found == (
        "NCCL_IB_GID_INDEX=3, but GID 3 of roceP2p1s0f1 is empty; "
        "its RoCE v2 GID ::ffff:192.168.201.12 is at 4"
    )
    assert "moved from 3 to 4" in problem.remedy
    assert check_rdma(drifted, spark1_plan()) == []  # unset: NCCL finds index 4 itself
    assert check_rdma(ports("spark1-healthy.txt"), spark1_plan(NCCL_IB_GID_INDEX="3")) == []


def test_gid_index_that_is_no_number_is_named():
    plan = spark1_plan(NCCL_IB_GID_INDEX="auto")
    (problem,) = check_roce_v2_gids(ports("spark1-healthy.txt"), plan)
    assert problem.found == "NCCL_IB_GID_INDEX=auto is not a GID index"


def test_fabric_address_without_its_gid_is_named():
    """spark2's plan against spark1's sysfs: the HCA of the interface lacks .13's GID."""
    plan = rdma_plan(SPARK2, SPARKS.node_env(SPARK2))
    (problem,) = check_rdma(ports("spark1-healthy.txt"), plan)
    assert problem.found.startswith(
        "rocep1s0f1 port 1 (on enp1s0f1np1) has no RoCE v2 GID of 192.168.200.13 (GIDs: 0 IB/RoCE"
    )
    assert "ip -br addr show enp1s0f1np1" in problem.remedy


def test_only_one_twin_planned_is_named_twice_with_the_bandwidth_cost():
    plan = replace(spark1_plan(NCCL_IB_HCA="rocep1s0f1"), hcas=("rocep1s0f1",))
    assert check_rdma_ports_active(ports("spark1-healthy.txt"), plan) == []
    problems = check_twin_hcas_planned(ports("spark1-healthy.txt"), plan)
    assert [p.found for p in problems] == [
        "nodes[0].fabric.hcas leaves out roceP2p1s0f1, twin HCA of enp1s0f1np1's port",
        "NCCL_IB_HCA=rocep1s0f1 leaves out roceP2p1s0f1, twin HCA of enp1s0f1np1's port",
    ]
    assert "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1" in problems[0].remedy
    assert "~3 GB/s instead of ~24" in problems[0].remedy


def test_two_hcas_on_one_netdev_are_twins_too():
    """The multi-PF netdev form (kernel 6.9+ Socket Direct: two PFs under one netdev), where
    both RDMA devices are bound to the fabric interface itself."""
    seen = ports("multi-pf-netdev.txt")
    plan = RdmaPlan(("mlx5_0",), "", "", IPv4Address("10.10.0.11"), "eth2", "nodes[3].fabric.hcas")
    assert fabric_twins(seen, "eth2") == ["mlx5_0", "mlx5_1"]
    (problem,) = check_rdma(seen, plan)
    assert problem.found == "nodes[3].fabric.hcas leaves out mlx5_1, twin HCA of eth2's port"
    assert check_rdma(seen, replace(plan, hcas=("mlx5_0", "mlx5_1"))) == []


def test_planning_the_other_port_is_named():
    """NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0 (dgx-spark-playbooks #102) while the cable and the
    fabric address are on enp1s0f1np1."""
    other = "rocep1s0f0,roceP2p1s0f0"
    plan = replace(spark1_plan(NCCL_IB_HCA=other), hcas=tuple(other.split(",")))
    problems = check_rdma(ports("spark1-healthy.txt"), plan)
    assert [p.found for p in problems] == [
        "rocep1s0f0 port 1 (on enp1s0f0np0) is DOWN, Disabled",
        "roceP2p1s0f0 port 1 (on enP2p1s0f0np0) is DOWN, Disabled",
        "no planned HCA drives enp1s0f1np1: roceP2p1s0f0 port 1 (on enP2p1s0f0np0), "
        "rocep1s0f0 port 1 (on enp1s0f0np0)",
        "nodes[0].fabric.hcas leaves out rocep1s0f1, roceP2p1s0f1, twin HCA of enp1s0f1np1's port",
        "NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0 leaves out rocep1s0f1, roceP2p1s0f1, "
        "twin HCA of enp1s0f1np1's port",
    ]


def test_hca_in_nccl_ib_hca_missing_on_the_node():
    plan = spark1_plan(NCCL_IB_HCA="rocep1s0f1,roceP2p1s0f1,mlx5_0")
    (problem,) = check_rdma(ports("spark1-healthy.txt"), plan)
    assert problem.found == (
        "no RDMA device starting with mlx5_0 "
        "(present: roceP2p1s0f0, roceP2p1s0f1, rocep1s0f0, rocep1s0f1)"
    )
    assert problem.planned == "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1,mlx5_0 names mlx5_0"
    assert problem.remedy.startswith("`ibdev2netdev` lists this node's RDMA devices")
    assert "fix NCCL_IB_HCA;" in problem.remedy


def test_node_without_infiniband_reports_each_planned_hca_once():
    """The probe as recorded on this project's machine, which has no /sys/class/infiniband."""
    recorded = parse_sections((DATA / "no-infiniband-probe.txt").read_text())
    assert recorded["rdma-ports"].rc == 0
    problems = check_rdma(rdma_ports_of(recorded), spark1_plan())
    assert [p.found for p in problems] == [
        "no RDMA device rocep1s0f1 (present: none)",
        "no RDMA device roceP2p1s0f1 (present: none)",
    ]
    assert problems[0].planned == "nodes[0].fabric.hcas names rocep1s0f1"


def test_nccl_ib_hca_forms_as_nccl_documents():
    seen = {p.device: p for p in ports("mlx5-host.txt")}
    exact = parse_nccl_ib_hca("=mlx5_0:1")
    assert (exact.exclude, [t.text for t in exact.tokens]) == (False, ["mlx5_0:1"])
    assert [exact.selects(seen[d]) for d in ("mlx5_0", "mlx5_1")] == [True, False]
    excluded = parse_nccl_ib_hca("^=mlx5_1,mlx5_4")
    assert [excluded.selects(seen[d]) for d in ("mlx5_0", "mlx5_1")] == [True, False]
    assert parse_nccl_ib_hca("mlx5").selects(seen["mlx5_1"])  # a prefix, every port


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("=mlx5_0:1", []),
        ("mlx5", []),  # a prefix: one ACTIVE port suffices, NCCL skips the DOWN mlx5_1
        ("^mlx5_1", []),  # excluded, so its DOWN port is no finding
        ("=mlx5_0:2", ["no port 2 on mlx5_0 (present: mlx5_0, mlx5_1)"]),
        ("=mlx5", ["no RDMA device mlx5 (present: mlx5_0, mlx5_1)"]),
        ("=mlx5_0,mlx5_1", ["mlx5_1 port 1 (on gpu2_eth) is DOWN, Disabled"]),
    ],
)
def test_nccl_ib_hca_forms_on_an_mlx5_host(value, found):
    plan = replace(MLX5_HOST, nccl_ib_hca=value)
    assert [p.found for p in check_rdma(ports("mlx5-host.txt"), plan)] == found


def test_exclusion_of_a_planned_hca_is_named():
    plan = replace(MLX5_HOST, hcas=("mlx5_0", "mlx5_1"), nccl_ib_hca="^mlx5_1")
    problems = check_rdma_ports_active(ports("mlx5-host.txt"), plan)
    assert [p.found for p in problems] == [
        "mlx5_1 port 1 (on gpu2_eth) is DOWN, Disabled",
        "NCCL_IB_HCA=^mlx5_1 excludes mlx5_1",
    ]


def test_ipv6_roce_v2_gid_is_no_ipv4_gid_and_one_function_card_has_no_twin():
    seen = ports("mlx5-host.txt")
    assert [g.ipv4 for g in seen[0].gids][3:] == [IPv4Address("10.200.1.10"), None, None]
    assert fabric_twins(seen, "gpu1_eth") == ["mlx5_0"]  # same card, same PCI domain


def test_plan_without_hcas_names_none():
    lab = load_inventory(INVENTORIES / "lab.yaml")
    node = lab.nodes[0]
    assert not rdma_plan(node, lab.node_env(node)).names_hcas
    assert spark1_plan().names_hcas


def test_unknown_line_is_an_error():
    with pytest.raises(ValueError, match="not an rdma-ports line"):
        parse_rdma_sysfs("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)")


def test_probe_section_on_this_machine_is_quick_and_harmless():
    start = time.monotonic()
    out = subprocess.run(
        ["/bin/sh", "-c", probe_script((("rdma-ports", RDMA_PORTS),))],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    section = parse_sections(out.stdout)["rdma-ports"]
    assert time.monotonic() - start < 5
    assert (section.rc, out.stderr) == (0, "")
    if not Path("/sys/class/infiniband").exists():
        assert section.text == ""
    parse_rdma_sysfs(section.text)


def test_probe_section_reads_a_sysfs_shaped_tree(tmp_path):
    """The loop over a tree laid out as sysfs is (files, the PCI `device` link, `net/`),
    with GID 3 RoCE v2 and the unset GIDs all-zero: it prints the form the parser reads."""
    pci = tmp_path / "devices" / "pci0000:00" / "0000:01:00.1"
    (pci / "net" / "enp1s0f1np1").mkdir(parents=True)
    dev = tmp_path / "infiniband" / "rocep1s0f1"
    port = dev / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True)
    (dev / "device").symlink_to(pci)
    (dev / "sys_image_guid").write_text("fc4c:ea03:00f9:4230\n")
    for name, value in [
        ("state", "4: ACTIVE"),
        ("phys_state", "5: LinkUp"),
        ("rate", "200 Gb/sec (2X NDR)"),
        ("link_layer", "Ethernet"),
    ]:
        (port / name).write_text(value + "\n")
    for index in range(8):
        (port / "gids" / str(index)).write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    (port / "gids" / "3").write_text("0000:0000:0000:0000:0000:ffff:c0a8:c80c\n")
    (port / "gid_attrs" / "types" / "3").write_text("RoCE v2\n")
    (port / "gid_attrs" / "ndevs" / "3").write_text("enp1s0f1np1\n")
    script = RDMA_PORTS.replace("/sys/class/infiniband", str(tmp_path / "infiniband"))
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stderr) == (0, "")
    (seen,) = parse_rdma_sysfs(out.stdout)
    assert (seen.device, seen.netdevs, seen.pci) == ("rocep1s0f1", ("enp1s0f1np1",), "0000:01:00.1")
    assert [(g.index, g.type, str(g.ipv4)) for g in seen.gids] == [(3, "RoCE v2", "192.168.200.12")]
