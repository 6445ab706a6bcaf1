"""nvidia-smi parsers, foreign GPU users and unified memory, on recorded outputs (sources:
selftest/data/README.md)."""

from pathlib import Path

import pytest

from infergate.checks.gpu import (
    GIB,
    Gpu,
    GpuProcess,
    MemorySource,
    check_driver_versions,
    check_foreign_gpu_users,
    check_gpu_count,
    check_page_cache,
    memory_source,
    parse_nvidia_smi_compute_apps,
    parse_nvidia_smi_query_gpu,
    parse_nvidia_smi_table,
    parse_torch_facts_json,
)
from infergate.checks.memory import parse_meminfo

DATA = Path(__file__).parents[1] / "data"
H200_GPU0 = "GPU-715f7b3a-5f16-d91c-563a-e9480197a7b4"


def read(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize("name", ["h200/query-gpu.csv", "h200/query-gpu-units.csv"])
def test_query_gpu_h200_with_and_without_header(name):
    gpus = parse_nvidia_smi_query_gpu(read(name))
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0] == Gpu(0, "NVIDIA H200", H200_GPU0, "580.159.04", 143771, 0, 143156, "9.0")
    assert memory_source(gpus) is MemorySource.DEVICE


def test_query_gpu_gb10_memory_is_unknown_not_a_crash():
    fields = ("index", "name", "memory.total", "memory.used", "memory.free")
    (gpu,) = parse_nvidia_smi_query_gpu(read("gb10/query-gpu-index-name-memory.csv"), fields)
    assert (gpu.name, gpu.memory_total_mib, gpu.memory_used_mib, gpu.memory_free_mib) == (
        "NVIDIA GB10",
        None,
        None,
        None,
    )
    assert memory_source([gpu]) is MemorySource.MEMINFO


def test_query_gpu_gb10_header_form_names_its_own_fields():
    (gpu,) = parse_nvidia_smi_query_gpu(read("gb10/query-gpu-header-unsloth-10703.csv"))
    assert gpu.name == "NVIDIA GB10"
    assert gpu.memory_total_mib is None
    assert gpu.uuid is None


def test_query_gpu_error_text_is_a_value_error():
    with pytest.raises(ValueError, match="not 8 CSV fields"):
        parse_nvidia_smi_query_gpu(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        )


def test_table_h200_idle():
    table = parse_nvidia_smi_table(read("h200/nvidia-smi.txt"))
    assert (table.driver, table.cuda) == ("580.159.04", "13.0")
    assert [(g.index, g.name, g.memory_used_mib, g.memory_total_mib) for g in table.gpus] == [
        (0, "NVIDIA H200", 0, 143771),
        (1, "NVIDIA H200", 0, 143771),
    ]
    assert table.processes == ()


def test_table_h200_with_holder_lists_it():
    table = parse_nvidia_smi_table(read("h200/nvidia-smi-with-holder.txt"))
    assert table.gpus[0].memory_used_mib == 12815
    assert table.processes == (GpuProcess(624, "python3", 12806, "0"),)


def test_table_gb10_memory_not_supported():
    table = parse_nvidia_smi_table(read("gb10/nvidia-smi-header.txt"))
    assert (table.driver, table.cuda) == ("580.126.09", "13.0")
    (gpu,) = table.gpus
    assert (gpu.name, gpu.memory_total_mib) == ("NVIDIA GB10", None)
    assert memory_source(table.gpus) is MemorySource.MEMINFO


def test_table_without_driver_line_is_a_value_error():
    with pytest.raises(ValueError, match="no 'Driver Version'"):
        parse_nvidia_smi_table("bash: nvidia-smi: command not found\n")


def test_compute_apps_holder():
    (app,) = parse_nvidia_smi_compute_apps(read("h200/compute-apps.csv"))
    assert app == GpuProcess(624, "python3", 12806, "GPU-cd4d22aa-501f-2cc0-65ce-7e4b075d8c3c")


def test_compute_apps_empty_output_is_no_users():
    assert parse_nvidia_smi_compute_apps(read("h200/compute-apps-empty.csv")) == []


def test_compute_apps_gb10_reports_per_process_memory():
    fields = ("gpu_uuid", "pid", "process_name", "used_memory")
    (app,) = parse_nvidia_smi_compute_apps(read("gb10/compute-apps-llama-swap-782.csv"), fields)
    assert (app.pid, app.name, app.used_mib) == (114687, "/usr/local/bin/python", 19135)


def test_torch_facts_h200():
    facts = parse_torch_facts_json(read("h200/py-facts.json"))
    assert (facts.torch, facts.torch_cuda, facts.nccl) == ("2.11.0+cu130", "13.0", "2.28.9")
    assert facts.devices == ("NVIDIA H200", "NVIDIA H200")
    assert facts.mem_get_info[0] == (149557477376, 150109880320)


def test_same_driver_everywhere_passes():
    assert check_driver_versions({"spark1": "580.95.05", "spark2": "580.95.05"}) == []


def test_driver_mismatch_and_missing_are_named():
    problems = check_driver_versions(
        {"spark1": "580.95.05", "spark2": "580.126.09", "spark3": None}
    )
    assert [p.found for p in problems] == [
        "no NVIDIA driver answered on spark3",
        "drivers spark1 580.95.05, spark2 580.126.09",
    ]
    assert "nvidia-smi --query-gpu=driver_version" in problems[1].remedy


def test_driver_other_than_planned_is_named():
    (problem,) = check_driver_versions({"h200": "580.159.04"}, planned="580.95.05")
    assert problem.planned == "driver 580.95.05"


def test_gpu_count():
    gpus = parse_nvidia_smi_query_gpu(read("h200/query-gpu.csv"))
    assert check_gpu_count(gpus, 2, "nodes[0].gpus") == []
    (problem,) = check_gpu_count(gpus, 4, "nodes[1].gpus")
    assert problem.found == "2 GPU(s) (0: NVIDIA H200, 1: NVIDIA H200)"
    assert "nvidia-smi -L" in problem.remedy
    assert problem.remedy.endswith("else fix nodes[1].gpus in the plan")


def test_foreign_holder_is_named_with_pid_name_and_mib():
    apps = parse_nvidia_smi_compute_apps(read("h200/compute-apps.csv"))
    (problem,) = check_foreign_gpu_users(apps, allowed=["sglang*", "vllm*"])
    # the holder's UUID belongs to the first recording's host: query-gpu.csv has other UUIDs
    assert problem.found == (
        "pid 624 (python3) holds 12806 MiB on GPU-cd4d22aa-501f-2cc0-65ce-7e4b075d8c3c"
    )
    assert "ps -o pid,user,etime,args -p 624" in problem.remedy
    assert "kill 624" in problem.remedy


def test_foreign_holder_names_the_gpu_index_when_known():
    apps = [GpuProcess(624, "python3", 12806, H200_GPU0)]
    gpus = parse_nvidia_smi_query_gpu(read("h200/query-gpu.csv"))
    (problem,) = check_foreign_gpu_users(apps, gpus=gpus)
    assert problem.found.endswith("on GPU 0")


def test_allowed_holder_by_glob_on_the_base_name():
    apps = parse_nvidia_smi_compute_apps(
        read("gb10/compute-apps-llama-swap-782.csv"),
        ("gpu_uuid", "pid", "process_name", "used_memory"),
    )
    assert check_foreign_gpu_users(apps, allowed=["python*"]) == []
    assert check_foreign_gpu_users([], allowed=[]) == []


def test_page_cache_gap_on_unified_memory_says_drop_caches():
    available = parse_meminfo(read("gb10/meminfo-idle.txt"))["MemAvailable"]  # 113.1 GiB
    engine_free = int(74.9 * GIB)  # vllm #35313's "Free memory on device cuda:0 (74.9/..."
    (problem,) = check_page_cache(engine_free, available)
    assert problem.found == (
        "torch.cuda.mem_get_info free 74.9 GiB, 38.2 GiB below MemAvailable 113.1 GiB"
    )
    assert "sync; echo 3 > /proc/sys/vm/drop_caches" in problem.remedy


def test_page_cache_small_gap_passes():
    available = parse_meminfo(read("gb10/meminfo-idle.txt"))["MemAvailable"]
    assert check_page_cache(available - 9 * GIB, available) == []
