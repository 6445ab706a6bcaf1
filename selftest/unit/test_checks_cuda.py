"""Driver against image CUDA, forward-compat libraries and CUDA init, on recorded outputs
(sources: selftest/data/README.md)."""

import json
from pathlib import Path

import pytest

from infergate.checks.cuda import (
    CudaInit,
    ImageLibcuda,
    check_compat_libs,
    check_cuda_compatibility,
    compat_on_loader_path,
    cuda_compatibility_warnings,
    forward_compat_supported,
    image_libcuda,
    parse_cuda_init,
    parse_cuda_version,
    parse_cuda_version_json,
    parse_ldconfig_libcuda,
    parse_ls_compat,
    parse_proc_driver_version,
)
from infergate.checks.gpu import parse_nvidia_smi_table

DATA = Path(__file__).parents[1] / "data"
# github.com/eugr/spark-vllm-docker issue 266
NGC_BANNER = (
    "ERROR: This container was built for NVIDIA Driver Release 590.48 or later, but version "
    "580.159.03 was detected and compatibility mode is UNAVAILABLE."
)
# github.com/NVIDIA/TensorRT-LLM issue 1806: torch's warning when forward compat is refused
TORCH_804 = (
    "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run "
    "some cuda functions before calling NumCudaDevices() that might have already set an error? "
    "Error 804: forward compatibility was attempted on non supported HW (Triggered internally "
    "at ../c10/cuda/CUDAFunctions.cpp:108.)"
)
# github.com/lllyasviel/Fooocus issue 1313: torch on a driver older than its CUDA, no compat
TORCH_TOO_OLD = (
    "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please "
    "update your GPU driver by downloading and installing a new version from the URL: "
    "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to "
    "install a PyTorch version that has been compiled with your version of the CUDA driver."
)
GB10, H200 = "NVIDIA GB10", "NVIDIA H200"


def read(name: str) -> str:
    return (DATA / name).read_text()


def section(text: str, name: str) -> str:
    """One `== name` block of host-facts.txt."""
    return text.split(f"== {name}\n", 1)[1].split("\n== ", 1)[0]


@pytest.mark.parametrize(
    ("text", "version"),
    [("13.1.0", (13, 1)), ("13.0", (13, 0)), ("CUDA Version: 13.0", (13, 0)), ("13000", (13, 0))],
)
def test_cuda_version_forms(text, version):
    assert parse_cuda_version(text) == version


def test_driver_cuda_from_both_table_headers():
    for name in ("h200/nvidia-smi.txt", "gb10/nvidia-smi-header.txt"):
        assert parse_cuda_version(parse_nvidia_smi_table(read(name)).cuda) == (13, 0)


def test_version_json_absent_on_the_h200_host():
    assert parse_cuda_version_json(read("h200/cuda-version.json")) is None


def test_proc_driver_version_and_compat_listing():
    facts = read("h200/host-facts.txt")
    assert parse_proc_driver_version(section(facts, "driver")) == "580.159.04"
    assert parse_ls_compat(section(facts, "compat")) == "580.95.05"
    assert parse_ls_compat("ls: cannot access '/usr/local/cuda/compat': No such file") is None


def test_ldconfig_resolves_the_drivers_own_libcuda():
    paths = parse_ldconfig_libcuda(read("h200/ldconfig-cuda.txt"))
    assert paths == ("/usr/local/nvidia/lib64/libcuda.so.1", "/lib/libcuda.so.1")
    assert not compat_on_loader_path(paths)
    assert compat_on_loader_path(paths, "/usr/local/cuda/compat:/usr/lib")


def test_cuinit_default_succeeds():
    init = parse_cuda_init(read("h200/cuinit-default.txt"))
    assert (init.ok, init.code, init.name, init.driver_api) == (True, 0, "CUDA_SUCCESS", (13, 0))


def test_cuinit_with_forced_compat_is_803():
    init = parse_cuda_init(read("h200/cuinit-compat-forced.txt"))
    assert (init.ok, init.code, init.name) == (False, 803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH")


def test_torch_804_is_recognised():
    init = parse_cuda_init(TORCH_804)
    assert (init.ok, init.code, init.name) == (
        False,
        804,
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    )


def test_torch_driver_too_old_is_recognised():
    init = parse_cuda_init(TORCH_TOO_OLD)
    assert (init.ok, init.code, init.driver_api) == (False, 35, (11, 4))
    (problem,) = check_cuda_compatibility((11, 4), (12, 1), "NVIDIA GeForce RTX 3050", init)
    assert problem.found.startswith("CUDA init fails: error 35 cudaErrorInsufficientDriver")
    assert problem.remedy.endswith("update the driver to >= 530.30.02")


def test_ngc_banner_is_a_failure_naming_the_driver_it_wants():
    init = parse_cuda_init(NGC_BANNER)
    assert (init.ok, init.wants_driver) == (False, "590.48")
    (problem,) = check_cuda_compatibility((13, 0), (13, 1), GB10, init)
    assert "compatibility mode is UNAVAILABLE" in problem.found
    assert problem.remedy == (
        "use an image built for CUDA <= 13.0, or update the driver to >= 590.48"
    )


def test_text_without_a_verdict():
    assert parse_cuda_init("nothing about CUDA here").ok is None


@pytest.mark.parametrize(
    ("image", "gpu"), [((13, 0), GB10), ((12, 8), GB10), ((13, 1), H200), ((13, 0), H200)]
)
def test_image_cuda_that_runs_passes(image, gpu):
    assert check_cuda_compatibility((13, 0), image, gpu) == []


def test_newer_minor_on_gb10_must_be_proven():
    (problem,) = check_cuda_compatibility((13, 0), (13, 1), GB10)
    assert "forward compatibility is not documented for NVIDIA GB10" in problem.found
    assert "prove it with the CUDA init probe" in problem.found
    assert problem.remedy.endswith(
        "use an image built for CUDA <= 13.0, or update the driver to >= 590.44.01"
    )


def test_newer_minor_proven_by_the_probe_passes():
    ok = parse_cuda_init(read("h200/cuinit-default.txt"))
    assert check_cuda_compatibility((13, 0), (13, 1), GB10, ok) == []


def test_newer_major_fails_even_on_a_data_center_gpu():
    (problem,) = check_cuda_compatibility((12, 9), (13, 0), H200)
    assert "needs forward compatibility (supported on this GPU)" in problem.found
    assert problem.remedy.endswith("update the driver to >= 580.65.06")


def test_probe_failure_overrides_the_prediction():
    failed = parse_cuda_init(read("h200/cuinit-compat-forced.txt"))
    (problem,) = check_cuda_compatibility((13, 0), (13, 0), H200, failed)
    assert problem.found.startswith(
        "CUDA init fails: error 803 CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (cuInit rc=803"
    )
    # CUDA 13.0 on a CUDA 13.0 driver needs no other libcuda: the one loaded is the mistake
    assert problem.remedy.startswith(
        "the image's CUDA runs natively on this driver, so a libcuda other than the driver's"
    )
    assert "remove /usr/local/cuda/compat from LD_LIBRARY_PATH" in problem.remedy
    assert "update the driver" not in problem.remedy


def forced_compat_on_the_h200() -> tuple[CudaInit, ImageLibcuda, tuple[int, int]]:
    """h200-device: driver 580.159.04 (CUDA 13.0), compat libcuda 580.95.05, cuInit run with
    LD_LIBRARY_PATH=/usr/local/cuda/compat (803), torch built for CUDA 13.0."""
    device = DATA / "h200-device"
    driver = parse_proc_driver_version((device / "proc-driver-version.txt").read_text())
    listing = (device / "compat-ls.txt").read_text().split()
    libs = image_libcuda(driver, listing, "/usr/local/cuda/compat")
    driver_cuda = parse_cuda_version(
        parse_nvidia_smi_table(read("h200-device/nvidia-smi.txt")).cuda
    )
    return parse_cuda_init((device / "cuinit-compat-forced.txt").read_text()), libs, driver_cuda


def test_803_with_compat_over_the_h200_driver_leads_with_the_compat_libs():
    init, libs, driver_cuda = forced_compat_on_the_h200()
    image_cuda = parse_cuda_version(json.loads(read("h200-device/py-facts.json"))["torch_cuda"])
    assert (driver_cuda, image_cuda) == ((13, 0), (13, 0))
    (problem,) = check_cuda_compatibility(driver_cuda, image_cuda, H200, init, libs)
    assert problem.remedy == (
        "the image's forward-compat libcuda 580.95.05 is loaded over driver 580.159.04: remove "
        "/usr/local/cuda/compat from LD_LIBRARY_PATH / /etc/ld.so.conf.d in the image (or run "
        "with the driver's libcuda)"
    )


def test_803_with_compat_and_unknown_image_cuda_puts_the_versions_last():
    init, libs, driver_cuda = forced_compat_on_the_h200()
    assert parse_cuda_version_json(read("h200-device/cuda-version.json")) is None
    (problem,) = check_cuda_compatibility(driver_cuda, None, H200, init, libs)
    assert problem.remedy.startswith("the image's forward-compat libcuda 580.95.05 is loaded")
    assert problem.remedy.endswith(
        "; if the image needs a newer CUDA, use an image built for CUDA <= 13.0, or update the "
        "driver to one whose nvidia-smi shows the image's CUDA or newer"
    )


def test_803_with_an_image_newer_than_the_driver_leads_with_the_versions():
    init, libs, _ = forced_compat_on_the_h200()
    (problem,) = check_cuda_compatibility((13, 0), (13, 1), H200, init, libs)
    assert problem.remedy.startswith(
        "use an image built for CUDA <= 13.0, or update the driver to >= 590.44.01; the image's "
        "forward-compat libcuda 580.95.05"
    )


def test_the_in_image_probe_sees_compat_off_the_path():
    part = json.loads(
        read("h200-device/inimage-ok-rank0.txt").split("@@@ cuda 0\n")[1].split("\n")[0]
    )
    libs = image_libcuda("580.159.04", part["compat"], part["LD_LIBRARY_PATH"])
    assert libs == ImageLibcuda("580.159.04", "580.95.05", on_path=False)


def test_804_on_gb10_says_it_has_no_forward_compatibility():
    (problem,) = check_cuda_compatibility((13, 0), (13, 1), GB10, parse_cuda_init(TORCH_804))
    assert problem.remedy == (
        "NVIDIA GB10 does not support forward compatibility, which this image's CUDA needs on "
        "this driver: use an image built for CUDA <= 13.0, or update the driver to >= 590.44.01"
    )
    (native,) = check_cuda_compatibility((13, 0), (13, 0), GB10, parse_cuda_init(TORCH_804))
    assert native.remedy.startswith(
        "NVIDIA GB10 refuses forward compatibility and the image's CUDA does not need it: remove"
    )


def test_unknown_image_cuda_without_probe_asks_for_the_probe():
    (problem,) = check_cuda_compatibility((13, 0), None, GB10)
    assert "torch.zeros(1, device='cuda')" in problem.remedy
    assert check_cuda_compatibility((13, 0), None, GB10, CudaInit(True, 0, "ok", "")) == []


def test_minor_version_compat_warns_about_ptx_and_names_the_gpu():
    (h200,) = cuda_compatibility_warnings((13, 0), (13, 1), H200)
    assert "minor-version compatibility" in h200.found
    assert "supported on this GPU" in h200.found
    assert "PTX JIT" in h200.remedy
    (gb10,) = cuda_compatibility_warnings((13, 0), (13, 1), GB10)
    assert "not documented for NVIDIA GB10" in gb10.found
    assert cuda_compatibility_warnings((13, 0), (13, 0), GB10) == []


@pytest.mark.parametrize(
    ("name", "supported"),
    [
        (H200, True),
        ("NVIDIA A100-SXM4-80GB", True),
        (GB10, False),
        ("NVIDIA GeForce RTX 4090", False),
    ],
)
def test_forward_compat_support_by_gpu(name, supported):
    assert forward_compat_supported(name) is supported


def test_compat_libs_over_a_newer_driver_fail_as_labs_molt_44_says():
    facts = read("h200/host-facts.txt")
    driver = parse_proc_driver_version(section(facts, "driver"))
    compat = parse_ls_compat(section(facts, "compat"))
    assert check_compat_libs(driver, compat, on_path=False) == []  # as the host ships
    (problem,) = check_compat_libs(driver, compat, on_path=True)  # as cuinit-compat-forced ran
    assert problem.found == (
        "forward-compat libcuda 580.95.05 (/usr/local/cuda/compat) on the loader path over "
        "the newer driver 580.159.04"
    )
    assert "LD_LIBRARY_PATH" in problem.remedy
    assert "803" in problem.remedy


def test_compat_libs_over_an_older_driver_pass():
    assert check_compat_libs("580.95.05", "590.48.01", on_path=True) == []
