"""The GPU checks on what the suite's own probe read on a real 2xH200 host (device tool,
2026-11-30; selftest/data/README.md), and the suite's verdicts there."""

from pathlib import Path

import pytest

from infergate.checks.cuda import check_compat_libs, parse_cuda_init
from infergate.checks.facts import (
    ProbeError,
    compat_libs_of,
    docker_of,
    gpu_apps_of,
    gpu_health_of,
    gpus_of,
    image_id_of,
    kernel_log_of,
    nvml_versions_of,
    pressure_of,
    smi_table_of,
)
from infergate.checks.gpu import check_foreign_gpu_users, check_gpu_count
from infergate.checks.gpu_health import check_gpu_health
from infergate.checks.gpu_kernel import check_kernel_gpu_log, check_nvml_mismatch
from infergate.checks.inimage_ran import probe_blockers
from infergate.checks.kernel_log import check_kernel_log
from infergate.checks.nccl import parse_torchrun_log
from infergate.checks.probe import parse_sections
from infergate.fixtures.inventory import load_inventory

DATA = Path(__file__).parents[1] / "data" / "h200-device"
PREFLIGHT = DATA / "preflight"  # the suite with the in-image checks that say why they did not run
DEVICE_PLAN = Path(__file__).resolve().parents[2] / "inventories" / "h200-device.yaml"


def probe(name: str):
    return parse_sections((DATA / name).read_text())


def test_two_h200_with_the_driver_and_cuda_of_the_host():
    sections = probe("probe-h200.txt")
    gpus = gpus_of(sections)
    assert [(g.index, g.name, g.driver) for g in gpus] == [
        (0, "NVIDIA H200", "580.159.04"),
        (1, "NVIDIA H200", "580.159.04"),
    ]
    assert check_gpu_count(gpus, 2, "nodes[0].gpus") == []
    assert smi_table_of(sections).cuda == "13.0"


def test_idle_host_has_no_gpu_users_and_the_holder_is_named():
    assert gpu_apps_of(probe("probe-h200.txt")) == []
    held = probe("probe-h200-holder.txt")
    (problem,) = check_foreign_gpu_users(gpu_apps_of(held), (), gpus_of(held))
    assert problem.found == "pid 1193 (python3) holds 12898 MiB on GPU 0"


def test_compat_libs_lie_beside_a_newer_driver_but_off_the_loader_path():
    libs = compat_libs_of(probe("probe-h200.txt"))
    assert (libs.host_driver, libs.compat_driver, libs.on_path) == (
        "580.159.04",
        "580.95.05",
        False,
    )
    assert check_compat_libs(libs.host_driver, libs.compat_driver, libs.on_path) == []
    (problem,) = check_compat_libs(libs.host_driver, libs.compat_driver, on_path=True)
    assert "803" in problem.found + problem.remedy


def test_forcing_the_compat_libs_really_fails_with_803():
    assert parse_cuda_init((DATA / "cuinit-default.txt").read_text()).ok
    forced = parse_cuda_init((DATA / "cuinit-compat-forced.txt").read_text())
    assert (forced.ok, forced.code) == (False, 803)


def test_nccl_over_nvlink_and_over_sockets():
    default = parse_torchrun_log((DATA / "allreduce-default.txt").read_text())
    sockets = parse_torchrun_log((DATA / "allreduce-socket.txt").read_text())
    assert default.transports == frozenset({"P2P/CUMEM"})
    assert sockets.transports == frozenset({"NET/Socket"})
    assert default.allreduce is not None
    assert sockets.allreduce is not None
    assert default.allreduce.busbw_gbps == 332.3
    assert sockets.allreduce.busbw_gbps == 3.5


def test_the_suite_itself_went_green_then_red_on_the_holder():
    green = (DATA / "gpu-green.txt").read_text()
    red = (DATA / "gpu-red.txt").read_text()
    assert "4 passed, 21 deselected" in green
    assert "1 failed, 3 passed" in red
    assert "FAILED tests_preflight/test_gpu.py::test_no_foreign_gpu_users[h200]" in red


def test_no_docker_there_keeps_the_probe_from_starting_in_the_docker_checks_own_words():
    sections = probe("preflight/probe-idle.txt")
    with pytest.raises(ProbeError):  # the fixture reads this as "no image ID known"
        image_id_of(sections)
    blocked = probe_blockers(load_inventory(DEVICE_PLAN), {"h200": docker_of(sections)}, {})
    (problem,) = blocked["h200"]
    assert problem.found == "no docker CLI (sh: 1: docker: not found)"
    # the recorded run skipped each in-image test with exactly that finding and remedy
    skips = [
        line
        for line in (PREFLIGHT / "gpu-green.txt").read_text().splitlines()
        if line.startswith("SKIPPED")
    ]
    assert len(skips) == 3
    assert all(problem.found in line and problem.remedy in line for line in skips)


@pytest.mark.parametrize(("run", "deselected"), [("gpu-green.txt", 22), ("gpu-green-all.txt", 46)])
def test_healthy_host_green_and_the_in_image_checks_say_only_why_they_did_not_run(run, deselected):
    # gpu-green-all: plain `pytest -m gpu`, every phase collected on a host without `openai`
    text = (PREFLIGHT / run).read_text()
    assert f"4 passed, 3 skipped, {deselected} deselected" in text
    assert "FAILED" not in text
    assert "ERROR" not in text
    assert "no CUDA init probe" not in text
    assert "`via` lines" not in text


def test_a_holder_on_gpu_1_turns_the_healthy_host_red_naming_it():
    held = probe("preflight/probe-holder-gpu1.txt")
    (problem,) = check_foreign_gpu_users(gpu_apps_of(held), (), gpus_of(held))
    assert problem.found == "pid 923 (python3) holds 12898 MiB on GPU 1"
    red = (PREFLIGHT / "gpu-red.txt").read_text()
    assert "1 failed, 3 passed, 3 skipped" in red
    assert "FAILED tests_preflight/test_gpu.py::test_no_foreign_gpu_users[h200]" in red
    assert problem.found in red


INSTALLED = DATA / "preflight-installed"  # the wheel installed there, 2026-12-01: docs/preflight.md


def test_the_installed_suite_runs_the_health_checks_for_real_green_then_red_on_the_holder():
    """Issue 15's GPU checks (health, peers, Xid, NVML) ran on a real H200 from the wheel:
    green on the healthy host, and with 12 GiB held only the foreign-user test went red."""
    green = (INSTALLED / "gpu-green.txt").read_text()
    red = (INSTALLED / "gpu-red.txt").read_text()
    for run in (green, red):
        assert "tests_preflight/test_gpu_health.py ....  " in run  # all four passed
        assert "no swap, psi 0.00%  ok, N/A: retired pages" in run  # the summary's columns
    assert "8 passed, 4 skipped, 37 deselected" in green
    assert "FAILED" not in green
    assert "1 failed, 7 passed, 4 skipped, 37 deselected" in red
    failures = red.split("= FAILURES =")[1].split("infergate: per-node summary")[0]
    (failed,) = [line.strip("_ ") for line in failures.splitlines() if line.startswith("___")]
    assert failed == "test_no_foreign_gpu_users[h200]"
    assert "holds 12898 MiB on GPU 0" in red


def test_the_real_h200_probe_reads_healthy_in_every_new_judge():
    sections = parse_sections((INSTALLED / "probe-idle.txt").read_text())
    (gpu,) = gpu_health_of(sections)
    assert (gpu.sm_max_mhz, gpu.power_limit_w, gpu.reasons) == (1980, 700.0, 0x1)  # idle
    assert check_gpu_health([gpu]) == []
    log = kernel_log_of(sections)
    assert log.source == "dmesg"
    # its boot command line names mlx5_core (driver_async_probe=): no mlx5 error for that
    assert any("mlx5_core" in line for line in log.lines)
    assert check_kernel_log(log, ["fab0"]) == []
    assert check_kernel_gpu_log(log) == []
    smi, module, library = nvml_versions_of(sections)
    assert (module, library) == ("580.159.04", "580.159.04")
    assert check_nvml_mismatch(smi, module, library) == []
    assert pressure_of(sections).psi_some_avg10 == 0.0
    assert pressure_of(sections).swap_used == 0
