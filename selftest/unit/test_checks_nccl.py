"""The rendezvous smoke's output: transports, bus bandwidth and failure signatures, on
torchrun outputs recorded on a 2xH200 host (sources: selftest/data/README.md)."""

from pathlib import Path

import pytest

from infergate.checks.nccl import (
    AllReduce,
    check_nccl_bandwidth,
    check_nccl_transport,
    check_rendezvous,
    parse_torchrun_log,
    transport_kind,
)

DATA = Path(__file__).parents[1] / "data"


def run(name: str):
    return parse_torchrun_log((DATA / "h200" / name).read_text())


def test_allreduce_default_busbw():
    result = run("allreduce-default.txt")
    assert result.allreduce == AllReduce(2, 1073741824, 3.32, 323.8, 323.8)
    assert result.transports == frozenset()  # recorded without NCCL_DEBUG=INFO
    assert check_rendezvous(result) == []


def test_allreduce_over_sockets():
    result = run("allreduce-socket.txt")
    assert result.allreduce == AllReduce(2, 268435456, 78.07, 3.4, 3.4)
    assert result.transports == {"NET/Socket"}
    assert result.nccl_env["NCCL_SOCKET_IFNAME"] == "lo"
    assert result.nccl_env["NCCL_IB_DISABLE"] == "1"


def test_default_nccl_info_uses_p2p_and_finds_no_ib():
    result = run("nccl-default-info.txt")
    assert result.transports == {"P2P/CUMEM"}
    assert result.ib_no_device
    assert (result.exit_code, result.ranks_ok) == (0, {0, 1})
    assert check_rendezvous(result) == []
    assert check_nccl_transport(result, "P2P") == []


def test_gloo_over_lo_succeeds():
    result = run("gloo-lo.txt")
    assert (result.exit_code, result.ranks_ok, result.failures) == (0, {0, 1}, ())
    assert check_rendezvous(result) == []


def test_wrong_nccl_ifname_names_nccl_socket_ifname():
    result = run("nccl-wrong-ifname.txt")
    assert result.exit_code == 1
    assert {f.kind for f in result.failures} == {"nccl-no-interface", "nccl-error"}
    (problem,) = check_rendezvous(result)
    assert problem.found.startswith("rendezvous failed with NCCL_SOCKET_IFNAME=ib9: ")
    assert "Bootstrap : no socket interface found" in problem.found
    assert problem.remedy.startswith("set NCCL_SOCKET_IFNAME to the fabric interface")


def test_wrong_gloo_ifname_names_gloo_socket_ifname():
    result = run("gloo-wrong-ifname.txt")
    assert result.exit_code == 1
    (failure,) = result.failures
    assert failure.kind == "gloo-no-address"
    assert failure.line.endswith("Unable to find address for: ib9")
    (problem,) = check_rendezvous(result)
    assert "GLOO_SOCKET_IFNAME" in problem.remedy


def test_deadline_without_a_signature_says_a_rank_never_joined():
    # a real run's first lines, cut where the recorder's deadline struck: it appends exit=124
    head = (DATA / "h200/gloo-lo.txt").read_text().splitlines()[:4]
    (problem,) = check_rendezvous(parse_torchrun_log("\n".join([*head, "exit=124"])))
    assert problem.found.startswith("timed out: ")
    assert problem.remedy.startswith("start every node")


def test_plan_says_rdma_but_nccl_used_sockets():
    (problem,) = check_nccl_transport(run("allreduce-socket.txt"), "NET/IB")
    assert problem.found == "NCCL used NET/Socket"
    assert problem.planned == "NET/IB between the ranks"
    assert "NCCL_IB_HCA" in problem.remedy


def test_no_ib_device_is_said_next_to_the_transport():
    (problem,) = check_nccl_transport(run("nccl-default-info.txt"), "NET/IB")
    assert problem.found == "NCCL used P2P/CUMEM (NET/IB : No device found)"


def test_no_transport_lines_asks_for_nccl_debug():
    (problem,) = check_nccl_transport(run("allreduce-default.txt"), "P2P")
    assert "NCCL_DEBUG=INFO" in problem.remedy


@pytest.mark.parametrize(
    ("via", "kind"),
    [
        ("NET/IB/GDRDMA", "NET/IB"),
        ("NET/IBext_v8/GDRDMA", "NET/IB"),
        ("NET/Socket", "NET/Socket"),
        ("P2P/CUMEM", "P2P"),
        ("SHM/direct/direct", "SHM"),
    ],
)
def test_transport_kinds(via, kind):
    assert transport_kind(via) == kind


def test_bandwidth_floor():
    assert check_nccl_bandwidth(run("allreduce-default.txt").allreduce, 18.0) == []
    (problem,) = check_nccl_bandwidth(run("allreduce-socket.txt").allreduce, 18.0)
    assert problem.found == "all-reduce busbw 3.4 GB/s (256 MiB in 78.07 ms, 2 ranks)"
    assert problem.planned == "at least 18 GB/s (thresholds.nccl_busbw_min_gbytes_per_sec)"
    (missing,) = check_nccl_bandwidth(run("nccl-wrong-ifname.txt").allreduce, 18.0)
    assert missing.found == "no bandwidth line: the all-reduce did not complete"
