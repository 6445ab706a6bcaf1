"""Named failures instead of generic ones, on recorded outputs: NVML's driver/library version
mismatch, CUDA error 802, and the known-bad version list over the in-image probe's versions
(gpu-public/ names each public source; h200-device/ is the suite's own probe on a lent H200;
selftest/data/README.md)."""

import json
from pathlib import Path

import pytest

from infergate.checks.cuda import check_cuda_compatibility, parse_cuda_init
from infergate.checks.facts import nvml_versions_of
from infergate.checks.gpu_kernel import check_nvml_mismatch
from infergate.checks.known_bad import check_known_bad, load_known_bad
from infergate.checks.probe import parse_sections

DATA = Path(__file__).parents[1] / "data"
PUBLIC = DATA / "gpu-public"


def device(name: str):
    return parse_sections((DATA / "h200-device" / name).read_text())


def test_nvml_mismatch_is_named_with_both_versions():
    smi = (PUBLIC / "nvml-mismatch-tinygrad-47.txt").read_text()
    (problem,) = check_nvml_mismatch(smi, "570.124.06", None)
    assert "kernel module 570.124.06, NVML library 570.124" in problem.found
    assert "`sudo reboot`" in problem.remedy
    smi, module, library = nvml_versions_of(device("probe-health-idle.txt"))
    assert library == "580.159.04"
    assert check_nvml_mismatch(smi, module, library) == []


def test_cuda_802_names_the_fabric_manager():
    init = parse_cuda_init((PUBLIC / "cuda-802-hf-hub-4134.txt").read_text())
    assert (init.ok, init.code, init.name) == (False, 802, "CUDA_ERROR_SYSTEM_NOT_READY")
    (problem,) = check_cuda_compatibility((13, 0), (13, 0), "NVIDIA H200", init)
    assert "error 802" in problem.found
    assert problem.remedy.startswith("the NVSwitch fabric is not initialised")
    assert "systemctl status nvidia-fabricmanager" in problem.remedy


def test_known_bad_list_has_a_source_for_every_entry_and_judges_versions():
    deny = load_known_bad()
    assert deny
    assert all(bad.source.startswith("https://github.com/") for bad in deny)
    (problem,) = check_known_bad({"nccl": "2.30.4", "torch": "2.11.0+cu130"}, deny)
    assert "https://github.com/NVIDIA/nccl/issues/2167" in problem.found
    with pytest.raises(ValueError, match="no source URL"):
        load_known_bad("- {component: nccl, versions: ['2.0'], why: x, use: y}")


def test_the_recorded_image_versions_are_not_known_bad():
    text = (DATA / "h200-device" / "inimage-ok-rank0.txt").read_text()
    sections = parse_sections(text)
    versions = json.loads(sections["versions"].text)
    assert versions["nccl"] == "2.28.9"
    assert check_known_bad(versions) == []
    (unknown,) = check_known_bad({"error": "ModuleNotFoundError: No module named 'torch'"})
    assert unknown.found.startswith("the image's versions are unknown")
