"""The kernel-log, RDMA-health and per-rail bandwidth judges on recorded forms
(selftest/data/kernel-log/, rdma/spark1-health-*, bandwidth/: sources in their READMEs), the
kernel-log section and a TCP rail run for real on this machine."""

import subprocess
from pathlib import Path

import pytest

from infergate.checks.bandwidth import (
    MARKER,
    Rail,
    check_rails,
    ib_write_bw_client,
    parse_ib_write_bw,
    parse_receiver,
    parse_tcp_answer,
    receive_command,
    send_command,
)
from infergate.checks.facts import kernel_log_of, rdma_ports_of
from infergate.checks.kernel_log import KERNEL_LOG, check_kernel_log
from infergate.checks.ports import stop_listener_command
from infergate.checks.probe import RDMA_PORTS, parse_sections, probe_script
from infergate.checks.rdma_health import check_rdma_health, link_rate_gbps
from infergate.checks.rdma_sysfs import parse_rdma_sysfs, rdma_plan
from infergate.fixtures.inventory import load_inventory

DATA = Path(__file__).parents[1] / "data"
SPARKS = load_inventory(
    Path(__file__).resolve().parents[2] / "inventories" / "two-sparks-vllm.yaml"
)
SPARK1 = SPARKS.nodes[0]
TWINS = ["enp1s0f1np1", "enP2p1s0f1np1"]


def kernel_log(name: str):
    return kernel_log_of(parse_sections((DATA / "kernel-log" / name).read_text()))


def test_kernel_log_read_as_root_here_is_clean():
    """The section run on this machine as root: dmesg reads, nothing of ours in it."""
    script = probe_script((("kernel-log", KERNEL_LOG),))
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)
    log = kernel_log_of(parse_sections(done.stdout))
    assert (log.source, log.unreadable) == ("dmesg", "")
    assert check_kernel_log(log, ["fab0"]) == []
    assert kernel_log("debian-root.txt") == kernel_log("debian-root.txt")


def test_kernel_log_refused_is_unknown_naming_the_permission():
    log = kernel_log("debian-nobody.txt")
    assert log.source == ""
    assert "`dmesg: read kernel buffer failed: Operation not permitted`" in log.unreadable
    assert "`No journal files were found.`" in log.unreadable
    assert "kernel.dmesg_restrict=1 and no CAP_SYSLOG" in log.unreadable
    assert "nor the journal (it has no files)" in log.unreadable


def test_kernel_log_on_the_h200_device():
    """Read as root on the H200 device: its boot command line names mlx5_core and is no mlx5
    error; as nobody, dmesg refused and no journalctl there."""
    log = kernel_log("h200-root.txt")
    assert log.source == "dmesg"
    assert any("driver_async_probe=mlx5_core" in line for line in log.lines)
    assert check_kernel_log(log, ["eth0"]) == []
    refused = kernel_log("h200-nobody.txt").unreadable
    assert refused.startswith(
        "`dmesg: read kernel buffer failed: Operation not permitted`; "
        "`sh: 7: journalctl: not found`: nobody may read neither the kernel ring buffer "
        "(kernel.dmesg_restrict=1 and no CAP_SYSLOG) nor the journal (no journalctl on the node)"
    )


def test_kernel_log_uncorrectable_aer_flagged_correctable_not():
    (problem,) = check_kernel_log(kernel_log("aer-fatal.txt"), ["fab0", "sfp-lan"])
    assert problem.found.startswith("2 uncorrectable PCIe AER error line(s)")
    assert "severity=Uncorrectable (Fatal), type=Transaction Layer" in problem.found
    assert problem.remedy.startswith("reboot the node before a run")


def test_kernel_log_mlx5_errors_flagged_start_up_lines_not():
    (problem,) = check_kernel_log(kernel_log("mlx5-errors.txt"), [])
    assert problem.found.startswith("3 mlx5 error line(s)")
    assert "irisc not responding" in problem.found
    assert check_kernel_log(kernel_log("mlx5-healthy.txt"), []) == []


def test_kernel_log_link_down_after_up_is_a_flap_boot_training_is_not():
    (problem,) = check_kernel_log(kernel_log("spark-link-flap.txt"), TWINS)
    assert problem.found.startswith("1 enp1s0f1np1 link down after up line(s)")
    assert "[ 5120.331907]" in problem.found
    assert "ip -s link show enp1s0f1np1" in problem.remedy
    assert check_kernel_log(kernel_log("spark-link-flap.txt"), ["enP2p1s0f1np1"]) == []


def spark1_ports(name: str):
    return rdma_ports_of(
        parse_sections(f"\n@@@ rdma-ports 0\n{(DATA / 'rdma' / name).read_text()}")
    )


SPARK1_PLAN = rdma_plan(SPARK1, SPARKS.node_env(SPARK1))


def test_rdma_health_clean_spark_passes_at_200g():
    ports = spark1_ports("spark1-health-clean.txt")
    assert {link_rate_gbps(p) for p in ports if p.up} == {200.0}
    assert check_rdma_health(ports, SPARK1_PLAN, 200) == []
    assert check_rdma_health(spark1_ports("spark1-healthy.txt"), SPARK1_PLAN, None) == []


def test_rdma_health_counters_rate_and_x2_twin_flagged():
    counters, rate_twin, rate, pcie = check_rdma_health(
        spark1_ports("spark1-health-degraded.txt"), SPARK1_PLAN, 400
    )
    assert (
        counters.found
        == "rocep1s0f1 port 1 (on enp1s0f1np1) counted symbol_error 12, link_downed 1"
    )
    assert rate.found == "rocep1s0f1 port 1 (on enp1s0f1np1) links at 200 Gb/sec (2X NDR)"
    assert rate.planned == "at least 400 Gb/s (fabric.rate_gbps)"
    assert rate_twin.found.startswith("roceP2p1s0f1 port 1 (on enP2p1s0f1np1) links at 200")
    assert pcie.found == "roceP2p1s0f1 (PCI 0002:01:00.1) trained at 32.0 GT/s PCIe x2"
    assert pcie.planned == "its maximum, 32.0 GT/s PCIe x4"
    assert "lspci -vvs 0002:01:00.1" in pcie.remedy


def test_rdma_ports_section_reads_counters_and_pcie_link(tmp_path):
    """The probe's loop over a tree laid out as sysfs: counters, and the PCIe link files."""
    pci = tmp_path / "devices" / "0000:01:00.1"
    pci.mkdir(parents=True)
    for name, value in [
        ("current_link_speed", "32.0 GT/s PCIe"),
        ("current_link_width", "2"),
        ("max_link_speed", "32.0 GT/s PCIe"),
        ("max_link_width", "4"),
    ]:
        (pci / name).write_text(value + "\n")
    dev = tmp_path / "infiniband" / "rocep1s0f1"
    (dev / "ports" / "1" / "counters").mkdir(parents=True)
    (dev / "device").symlink_to(pci)
    (dev / "ports" / "1" / "counters" / "symbol_error").write_text("7\n")
    (dev / "ports" / "1" / "counters" / "link_downed").write_text("0\n")
    script = RDMA_PORTS.replace("/sys/class/infiniband", str(tmp_path / "infiniband"))
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stderr) == (0, "")
    (port,) = parse_rdma_sysfs(out.stdout)
    assert port.counters == (("symbol_error", 7), ("link_downed", 0))
    assert port.pcie is not None
    assert port.pcie.degraded
    assert (port.pcie.text, port.pcie.max_text) == ("32.0 GT/s PCIe x2", "32.0 GT/s PCIe x4")


def test_ib_write_bw_average_in_gbits():
    text = (DATA / "bandwidth" / "ib_write_bw-gbits.txt").read_text()
    assert parse_ib_write_bw(text) == (0.48, "")
    gbps, said = parse_ib_write_bw((DATA / "bandwidth" / "ib_write_bw-mbytes-head.txt").read_text())
    assert gbps is None
    assert said == "ib_write_bw reported MB/sec, not Gb/sec (--report_gbits)"
    assert parse_ib_write_bw(" Couldn't connect to 10.0.0.2:12000\n") == (
        None,
        "Couldn't connect to 10.0.0.2:12000",
    )


def test_ib_write_bw_client_is_the_playbooks_form_for_whole_seconds():
    """NVIDIA's `ib_write_bw -d rocep1s0f0 -i 1 -p 12000 -F --report_gbits` (NVIDIA/dgx-spark-
    playbooks nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md), bounded by
    `-D`, which perftest reads as whole seconds."""
    assert ib_write_bw_client("rocep1s0f1", 12000, "192.168.200.13") == (
        "ib_write_bw -d rocep1s0f1 -p 12000 -D 1 -F --report_gbits 192.168.200.13"
    )


def test_tcp_rail_measured_for_real_on_loopback():
    """The receiver and sender as the fixture runs them, here over loopback: a figure comes
    back, and a threshold above it is a problem of the sender naming both ends."""
    started = subprocess.run(
        receive_command("127.0.0.1"), shell=True, capture_output=True, text=True, timeout=30
    )
    receiver = parse_receiver(started.stdout)
    assert receiver.port is not None, started
    assert receiver.pid is not None
    try:
        sent = subprocess.run(
            send_command("127.0.0.1", receiver.port),
            shell=True,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        subprocess.run(stop_listener_command(receiver.pid, MARKER), shell=True, timeout=30)
    gbps, said = parse_tcp_answer(sent.stdout)
    assert gbps is not None, (sent.stdout, said)
    assert gbps > 0.01
    rail = Rail("node1", "node2", "127.0.0.1 -> 127.0.0.1 (TCP)", gbps, said)
    assert check_rails([rail], gbps / 2, "fabric.min_gbps") == {}
    (problem,) = check_rails([rail], gbps * 2, "fabric.min_gbps")["node1"]
    assert problem.found.startswith("node1 -> node2 over 127.0.0.1 -> 127.0.0.1 (TCP) carried")
    assert problem.planned == f"at least {gbps * 2:g} Gb/s per rail (fabric.min_gbps)"


@pytest.mark.parametrize(
    ("output", "said"),
    [
        ("error ConnectionRefusedError [Errno 111] Connection refused", "error Connection"),
        ("", "the sender printed nothing"),
    ],
)
def test_tcp_rail_without_figure_is_the_receivers_and_says_why(output, said):
    """No figure is no slow link: the stream never ran, so the receiver's ports are named."""
    gbps, text = parse_tcp_answer(output)
    assert gbps is None
    assert text.startswith(said)
    problems = check_rails([Rail("a", "b", "x (TCP)", None, text)], 1, "fabric.min_gbps")
    (problem,) = problems["b"]
    assert problem.found == f"no stream from a to b over x (TCP): {text}"
    assert problem.remedy.startswith("let a reach b's ephemeral ports over the fabric")


def test_tcp_rail_from_a_sender_without_route_is_the_senders():
    said = "error OSError [Errno 101] Network is unreachable"  # the lab's link-down node2
    problems = check_rails([Rail("a", "b", "x (TCP)", None, said)], 1, "fabric.min_gbps")
    (problem,) = problems["a"]
    assert problem.remedy.startswith("bring a's fabric interface up with its address")
