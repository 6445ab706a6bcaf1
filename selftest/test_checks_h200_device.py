"""The GPU checks on what the suite's own probe read on a real 2xH200 host (device tool,
2026-11-30; selftest/data/README.md), and the suite's verdicts there."""

from pathlib import Path

from infergate.checks.cuda import check_compat_libs, parse_cuda_init
from infergate.checks.facts import compat_libs_of, gpu_apps_of, gpus_of, smi_table_of
from infergate.checks.gpu import check_foreign_gpu_users, check_gpu_count
from infergate.checks.nccl import parse_torchrun_log
from infergate.checks.probe import parse_sections

DATA = Path(__file__).parent / "data" / "h200-device"


def probe(name: str):
    return parse_sections((DATA / name).read_text())


def test_two_h200_with_the_driver_and_cuda_of_the_host():
    sections = probe("probe-h200.txt")
    gpus = gpus_of(sections)
    assert [(g.index, g.name, g.driver) for g in gpus] == [
        (0, "NVIDIA H200", "580.159.04"),
        (1, "NVIDIA H200", "580.159.04"),
    ]
    assert check_gpu_count(gpus, 2) == []
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
