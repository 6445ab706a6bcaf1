"""GPU health, the kernel's GPU lines and memory pressure, on recorded outputs: a 2xH200 host
idle and under load (h200/), the suite's own probe sections on a lent H200 (h200-device/,
kernel-log/h200-*), and public reports (gpu-public/, each file named after its source;
selftest/data/README.md), their dmesg lines replayed through the kernel-log section."""

import os
import random
import re
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from infergate.checks.facts import (
    gpu_health_of,
    kernel_log_of,
    pressure_of,
)
from infergate.checks.gpu_health import (
    check_gpu_health,
    check_gpu_peers,
    decode_reasons,
    health_summary,
    parse_nvidia_smi_health,
)
from infergate.checks.gpu_kernel import check_kernel_gpu_log
from infergate.checks.kernel_log import KEEP_LINES, KERNEL_LOG, KernelLog, check_kernel_log
from infergate.checks.pressure import (
    MemoryPressure,
    check_memory_pressure,
    describe,
    parse_proc_swaps,
    parse_psi_memory,
)
from infergate.checks.probe import parse_sections, probe_script

DATA = Path(__file__).parents[1] / "data"
PUBLIC = DATA / "gpu-public"


def device(name: str):
    return parse_sections((DATA / "h200-device" / name).read_text())


def kernel_log(name: str):
    return kernel_log_of(parse_sections((DATA / "kernel-log" / name).read_text()))


def replayed(dmesg: Path, tmp_path: Path) -> KernelLog:
    """The kernel-log section run here, its `dmesg` printing a recorded log: the section's own
    grep, tails and parser on lines this machine's kernel never logged."""
    shim = tmp_path / "dmesg"
    shim.write_text(f"#!/bin/sh\ncat {shlex.quote(str(dmesg))}\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    script = probe_script((("kernel-log", KERNEL_LOG),))
    done = subprocess.run(
        ["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, env=env
    )
    return kernel_log_of(parse_sections(done.stdout))


def recorded_csv(name: str):
    return parse_nvidia_smi_health((DATA / "h200" / name).read_text())


def test_idle_h200_is_healthy_and_names_what_it_cannot_read():
    (gpu,) = gpu_health_of(device("probe-health-idle.txt"))
    assert (gpu.sm_mhz, gpu.sm_max_mhz, gpu.power_limit_w, gpu.reasons) == (375, 1980, 700.0, 1)
    assert decode_reasons(gpu.reasons or 0) == ["GPU idle"]
    assert check_gpu_health([gpu]) == []
    # the H200 replaced page retirement by row remapping: N/A, neither pass nor fail
    assert gpu.retired_pending is None
    assert health_summary([gpu]) == "ok, N/A: retired pages"


def test_power_cap_under_load_is_no_fault():
    (gpu,) = gpu_health_of(device("probe-health-load.txt"))
    assert (gpu.sm_mhz, gpu.power_w, gpu.reasons) == (1470, 694.72, 0x4)
    assert decode_reasons(0x4) == ["SW power cap"]
    assert check_gpu_health([gpu]) == []


def test_the_csv_form_with_header_and_units_reads_alike():
    idle, load = recorded_csv("query-health-idle.csv"), recorded_csv("query-health-load.csv")
    assert [(g.index, g.sm_mhz, g.reasons, g.remap_pending) for g in load] == [
        (0, 1470, 0x4, False),
        (1, 345, 0x1, False),
    ]
    assert check_gpu_health(idle) == check_gpu_health(load) == []


def test_thermal_slowdown_clock_lock_and_power_cap_are_named():
    (gpu,) = gpu_health_of(device("probe-health-load.txt"))
    hot = replace(gpu, reasons=0x4 | 0x40)
    (problem,) = check_gpu_health([hot])
    assert "HW thermal slowdown" in problem.found
    assert problem.remedy.startswith("the GPU is too hot")
    locked = replace(gpu, reasons=0x2, app_clock_mhz=1500)
    (problem,) = check_gpu_health([locked])
    assert "applications clock 1500 MHz (default 1980)" in problem.found
    assert "-rgc" in problem.remedy
    (problem,) = check_gpu_health([replace(gpu, power_limit_w=500.0)])
    assert problem.remedy.endswith("`sudo nvidia-smi -i 0 -pl 700`")


def test_memory_errors_are_named_with_the_remedy_of_their_cause():
    (gpu,) = gpu_health_of(device("probe-health-idle.txt"))
    (pending,) = check_gpu_health([replace(gpu, ecc_uncorrected=2, remap_pending=True)])
    assert "2 uncorrected ECC errors" in pending.found
    assert "nvidia-smi -r -i 0" in pending.remedy
    (failed,) = check_gpu_health([replace(gpu, remap_failed=True)])
    assert "RMA" in failed.remedy


def test_a_node_whose_power_limit_differs_from_its_peers_is_named():
    idle = gpu_health_of(device("probe-health-idle.txt"))
    capped = [replace(g, power_limit_w=550.0) for g in idle]
    health = {"h200a": idle, "h200b": idle, "h200c": capped}
    problems = check_gpu_peers(health)
    assert list(problems) == ["h200c"]
    (problem,) = problems["h200c"]
    assert problem.found == "GPU 0 (NVIDIA H200) power limit 550 W"
    assert problem.planned == "700 W, as on the other NVIDIA H200 GPUs of the cluster"
    assert check_gpu_peers({"h200a": idle, "h200b": idle}) == {}


def test_boot_nvrm_lines_are_no_fault():
    log = kernel_log("h200-root.txt")
    assert (log.source, log.unreadable) == ("dmesg", "")
    assert any("Persistence mode is deprecated" in line for line in log.lines)
    assert check_kernel_gpu_log(log) == []


def test_a_refused_kernel_log_is_unknown_naming_the_permission():
    log = kernel_log("h200-nobody.txt")
    assert check_kernel_gpu_log(log) == []
    assert "Operation not permitted" in log.unreadable
    assert "kernel.dmesg_restrict=1 and no CAP_SYSLOG" in log.unreadable


@pytest.mark.parametrize(
    ("name", "found", "remedy"),
    [
        ("dmesg-xid79-nvsentinel-155.txt", "1 Xid line(s) (codes 79)", "xid-errors"),
        ("dmesg-fallen-off-nvsentinel-155.txt", "1 fatal NVRM line(s)", "xid-errors"),
        ("dmesg-api-mismatch-bazzite-2668.txt", "2 fatal NVRM line(s)", "(570.144) refuses"),
        ("dmesg-api-mismatch-nvidia-all-394.txt", "1 fatal NVRM line(s)", "(595.80) refuses"),
    ],
)
def test_xid_and_fatal_nvrm_lines_are_named(name, found, remedy, tmp_path):
    (problem,) = check_kernel_gpu_log(replayed(PUBLIC / name, tmp_path))
    assert problem.found.startswith(found)
    assert remedy in problem.remedy


def test_an_xid_storm_keeps_its_tail_and_the_aer_lines(tmp_path):
    """Each kind keeps its own last KEEP_LINES: an Xid repeated past that neither pushes an
    older uncorrectable AER line out nor is counted twice."""
    recorded = (DATA / "kernel-log" / "aer-fatal.txt").read_text().splitlines(keepends=True)
    aer = "".join(line for line in recorded if line.startswith("["))  # its dmesg lines
    xid = (PUBLIC / "dmesg-xid79-nvsentinel-155.txt").read_text()
    (tmp_path / "log").write_text(aer + xid * (KEEP_LINES + 100))
    log = replayed(tmp_path / "log", tmp_path)
    (gpu,) = check_kernel_gpu_log(log)
    assert gpu.found.startswith(f"{KEEP_LINES} Xid line(s) (codes 79)")
    (fabric,) = check_kernel_log(log, [])
    assert fabric.found.startswith("2 uncorrectable PCIe AER error line(s)")


FABRIC_WORDS = re.compile(
    r"AER|PCIe Bus Error|mlx5|link (is )?(up|down)|insufficient permissions|"
    r"not seeing messages|No journal files",
    re.IGNORECASE,
)


def test_the_section_sends_each_kinds_last_lines_in_log_order(tmp_path):
    """The node's filter against the rule written out here: NVRM/Xid lines in one tail, the
    fabric's words (any case) in the other, every other line dropped, each tail the last
    KEEP_LINES of its kind; a log of 3x KEEP_LINES lines of every kind, shuffled."""
    kinds = [
        "pcieport 0000:00:01.0: AER: Corrected error received",
        "mlx5_core 0000:01:00.0: cmd_work_handler:877: cmd[0]: ACCESS_REG timeout",
        "NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.",
        "enp1s0f1np1: Link is Up - 200Gbps",
        "fab0: LINK DOWN",
        "usb 1-1: new device",
        "PCIe Bus Error: severity=Corrected, type=Physical Layer",
        "eth0: link is flapping",
    ]
    lines = [f"[{i:7d}.5] {kinds[i % len(kinds)]} #{i}" for i in range(3 * KEEP_LINES)]
    random.Random(7).shuffle(lines)
    (tmp_path / "log").write_text("\n".join(lines) + "\n")
    gpu = [line for line in lines if re.search("NVRM|Xid", line)]
    fabric = [line for line in lines if line not in gpu and FABRIC_WORDS.search(line)]
    sent = replayed(tmp_path / "log", tmp_path)
    assert sent.source == "dmesg"
    assert list(sent.lines) == fabric[-KEEP_LINES:] + gpu[-KEEP_LINES:]


def test_swap_in_use_and_zram_are_read_and_judged():
    swaps = parse_proc_swaps((PUBLIC / "swaps-beszel-255.txt").read_text())
    assert [(s.name, s.zram, s.used) for s in swaps] == [
        ("/mnt/swapfile", False, 160952 * 1024),
        ("/dev/zram0", True, 0),
    ]
    pressure = MemoryPressure(swaps, 0.0)
    (problem,) = check_memory_pressure(pressure)
    assert problem.found == "swap in use on unified memory: /mnt/swapfile 0.2 GiB"
    assert describe(pressure) == "swap 0.2 GiB of 0.8 GiB, psi 0.00%"


def test_psi_is_judged_against_its_threshold():
    avg10 = parse_psi_memory((PUBLIC / "psi-systemd-psi-util.txt").read_text())
    assert avg10 == 0.22
    assert check_memory_pressure(MemoryPressure((), avg10)) == []
    (problem,) = check_memory_pressure(MemoryPressure((), avg10), psi_max=0.1)
    assert "0.22% of the last 10 s" in problem.found


def test_the_h200_has_no_swap_and_no_pressure():
    pressure = pressure_of(device("probe-health-idle.txt"))
    assert pressure == MemoryPressure((), 0.0)
    assert describe(pressure) == "no swap, psi 0.00%"
    assert (DATA / "h200-device" / "swapon-none.txt").read_text() == ""  # swapon agrees
