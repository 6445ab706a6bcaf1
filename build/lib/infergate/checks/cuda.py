"""Driver against the image's CUDA: versions, forward-compatibility libraries, and what CUDA
initialisation actually said. The versions only predict; a CUDA init probe in the image
settles it (docs/checks.md#cuda-compatibility).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from infergate.problems import Problem

CudaVersion = tuple[int, int]

# The oldest Linux driver of each CUDA GA release (CUDA Toolkit release notes, Table 3).
MIN_DRIVER: dict[CudaVersion, str] = {
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
    (13, 1): "590.44.01",
    (13, 2): "595.45.04",
    (13, 3): "610.43.02",
}
# Forward compatibility: "applicable only for systems with NVIDIA Data Center GPUs, select NGC
# Server Ready SKUs of RTX cards, Jetson boards" (NVIDIA's forward-compatibility doc).
_FORWARD_COMPAT_GPUS = frozenset(
    {"T4", "V100", "A2", "A10", "A16", "A30", "A40", "A100", "A800", "L4", "L20", "L40"}
    | {"L40S", "H20", "H100", "H200", "H800", "GH200", "B100", "B200", "B300", "GB200"}
    | {"GB300", "ORIN"}
)
CURESULT_NAMES = {
    35: "cudaErrorInsufficientDriver",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
}


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def format_cuda(version: CudaVersion) -> str:
    return f"{version[0]}.{version[1]}"


def parse_cuda_version(text: str) -> CudaVersion:
    """Parse a CUDA version as any tool prints it: ``13.1.0`` (version.json), ``CUDA Version:
    13.0`` (nvidia-smi), ``13.0`` (torch.version.cuda) or ``13000`` (cuDriverGetVersion)."""
    whole = re.fullmatch(r"\s*(\d{4,6})\s*", text)
    if whole:
        number = int(whole.group(1))
        return number // 1000, number % 1000 // 10
    dotted = re.search(r"(\d+)\.(\d+)", text)
    if dotted is None:
        raise ValueError(f"no CUDA version in {text.strip()[:120]!r}")
    return int(dotted.group(1)), int(dotted.group(2))


def parse_cuda_version_json(text: str) -> CudaVersion | None:
    """Parse `cat /usr/local/cuda/version.json`: the toolkit's CUDA, or None where the image
    (or host) has no toolkit there; then torch.version.cuda is the image's CUDA.

    Sample: ``{"cuda": {"name": "CUDA SDK", "version": "13.1.0"}, ...}``; absent:
    ``cat: /usr/local/cuda/version.json: No such file or directory``
    """
    if "No such file" in text:
        return None
    return parse_cuda_version(str(json.loads(text)["cuda"]["version"]))


def parse_proc_driver_version(text: str) -> str:
    """Parse `cat /proc/driver/nvidia/version`: the loaded kernel module's version.

    Sample line: ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release
    Build  (nixbld@)``
    """
    match = re.search(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", text + " ")
    if match is None:
        raise ValueError(f"no NVRM version in {text.strip()[:120]!r}")
    return match.group(1)


def parse_ls_compat(text: str) -> str | None:
    """Parse `ls -la /usr/local/cuda/compat`: the forward-compatibility libcuda's version,
    None where there is no compat package.

    Sample line: ``-rw-r--r--  1 root root 96276264 Sep 23  2025 libcuda.so.580.95.05``
    """
    versions = re.findall(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)\b", text)
    return max(versions, key=version_key) if versions else None


def parse_ldconfig_libcuda(text: str) -> tuple[str, ...]:
    """Parse `ldconfig -p | grep libcuda`: where the loader finds libcuda.so.1, in its order.

    Sample line: ``libcuda.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libcuda.so.1``
    """
    return tuple(
        line.split("=>", 1)[1].strip()
        for line in text.splitlines()
        if line.strip().startswith("libcuda.so.1 ") and "=>" in line
    )


def compat_on_loader_path(libcuda_paths: Sequence[str], ld_library_path: str = "") -> bool:
    """Whether a forward-compat libcuda is what a process will load: a `compat` directory on
    LD_LIBRARY_PATH (it wins over ldconfig) or first in the ldconfig cache."""
    dirs = [d.rstrip("/") for d in ld_library_path.split(":") if d]
    return any(d.endswith("/compat") for d in dirs) or (
        bool(libcuda_paths) and "/compat/" in libcuda_paths[0]
    )


class CompatFacts(Protocol):
    """Which libcuda a process loads, beside the kernel module's version: facts.CompatLibs
    (the host probe) and image_libcuda (the in-image probe) both have these."""

    @property
    def host_driver(self) -> str: ...
    @property
    def compat_driver(self) -> str | None: ...
    @property
    def on_path(self) -> bool: ...


@dataclass(frozen=True)
class ImageLibcuda:
    """The libcuda version in the image's /usr/local/cuda/compat, and whether the image's
    LD_LIBRARY_PATH puts that directory first."""

    host_driver: str
    compat_driver: str | None
    on_path: bool


def image_libcuda(
    host_driver: str, compat_files: Sequence[str] | None, ld_library_path: str | None
) -> ImageLibcuda:
    """The in-image probe's `cuda` part (the names in /usr/local/cuda/compat, LD_LIBRARY_PATH)
    beside the host's driver. The probe does not run ldconfig, so only LD_LIBRARY_PATH counts.

    Sample: ``"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/nvidia/lib", "compat":
    ["libcuda.so", "libcuda.so.1", "libcuda.so.580.95.05", ...]``
    """
    compat = parse_ls_compat("\n".join(compat_files)) if compat_files else None
    return ImageLibcuda(host_driver, compat, compat_on_loader_path((), ld_library_path or ""))


@dataclass(frozen=True)
class CudaInit:
    """CUDA init's verdict (`ok` None where the text says nothing either way), the CUresult or
    cudaError `code` printed, the `evidence` line that decided, cuDriverGetVersion's
    `driver_api`, and `wants_driver`: the driver an NGC banner says the image was built for."""

    ok: bool | None
    code: int | None
    name: str | None
    evidence: str
    driver_api: CudaVersion | None = None
    wants_driver: str | None = None


_CUINIT = re.compile(r"cuInit rc=(\d+) name=(\S+) driverVersion=(\d+)")
_BANNER = re.compile(
    r"built for NVIDIA Driver Release (\S+) or later, but version \S+ was detected "
    r"and compatibility mode is UNAVAILABLE"
)
_RUNTIME_ERROR = re.compile(r"Error (80[234]): ([^(\n]+)")
# gpu_probe.py's line for any other error
_TORCH_ERROR = re.compile(r"torch cuda error: (.+)")
# torch's words for error 35
_TOO_OLD = re.compile(r"driver on your system is too old \(found version (\d+)\)")


def parse_cuda_init(text: str) -> CudaInit:
    """Read CUDA initialisation's verdict from the probe (gpu_probe.py's cuinit form), an
    engine's log, or an NGC container's entrypoint banner.

    Sample lines: ``cuInit rc=803 name=CUDA_ERROR_SYSTEM_DRIVER_MISMATCH driverVersion=13000``;
    ``... Error 804: forward compatibility was attempted on non supported HW``; ``ERROR: This
    container was built for NVIDIA Driver Release 590.48 or later, but version 580.159.03 was
    detected and compatibility mode is UNAVAILABLE.``
    """
    cuinit = _CUINIT.search(text)
    api = parse_cuda_version(cuinit[3]) if cuinit else None
    failure = _failure(text, cuinit)
    if failure is not None:
        return replace(failure, driver_api=failure.driver_api or api)
    if cuinit:
        return CudaInit(True, 0, cuinit[2], _line_of(text, cuinit), api)
    return CudaInit(None, None, None, "", api)


def _failure(text: str, cuinit: re.Match[str] | None) -> CudaInit | None:
    if banner := _BANNER.search(text):
        line = _line_of(text, banner)
        return CudaInit(False, None, "compatibility mode is UNAVAILABLE", line, None, banner[1])
    if cuinit and cuinit[1] != "0":
        return CudaInit(False, int(cuinit[1]), cuinit[2], _line_of(text, cuinit))
    if runtime := _RUNTIME_ERROR.search(text):
        code = int(runtime[1])
        return CudaInit(False, code, CURESULT_NAMES[code], _line_of(text, runtime))
    if too_old := _TOO_OLD.search(text):
        api = parse_cuda_version(too_old[1])
        return CudaInit(False, 35, CURESULT_NAMES[35], _line_of(text, too_old), api)
    # e.g. no kernel image for this GPU's architecture
    if torch := _TORCH_ERROR.search(text):
        return CudaInit(False, None, torch[1][:120], _line_of(text, torch))
    return None


def _line_of(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end >= 0 else len(text)].strip()


def forward_compat_supported(gpu_name: str) -> bool:
    """Whether NVIDIA documents forward compatibility for this GPU (H200: yes; GB10: no)."""
    words = re.split(r"[\s\-_]+", gpu_name.upper())
    return any(word in _FORWARD_COMPAT_GPUS for word in words)


def _fix(driver_cuda: CudaVersion, image_cuda: CudaVersion | None, wants: str | None) -> str:
    need = wants or (MIN_DRIVER.get(image_cuda) if image_cuda else None)
    newer = f">= {need}" if need else "one whose nvidia-smi shows the image's CUDA or newer"
    older = format_cuda(driver_cuda)
    return f"use an image built for CUDA <= {older}, or update the driver to {newer}"


def _planned(driver_cuda: CudaVersion, image_cuda: CudaVersion | None) -> str:
    image = format_cuda(image_cuda) if image_cuda else "?"
    return f"the image's CUDA ({image}) initialises on the driver (CUDA {format_cuda(driver_cuda)})"


def check_cuda_compatibility(
    driver_cuda: CudaVersion,
    image_cuda: CudaVersion | None,
    gpu_name: str,
    init: CudaInit | None = None,
    libs: CompatFacts | None = None,
) -> list[Problem]:
    """The image's CUDA runs on this driver. A CUDA init probe's verdict overrides the
    prediction; without one, a newer major fails, and a newer minor where forward compatibility
    is undocumented (GB10). `libs` (the loaded libcuda) lets a failure's remedy name the cause."""
    planned = _planned(driver_cuda, image_cuda)
    if init is not None and init.ok is not None:
        if init.ok:
            return []
        remedy = _init_remedy(init, driver_cuda, image_cuda, gpu_name, libs)
        return [_init_failed(init, planned, remedy)]
    if image_cuda is None:
        return [_cuda_unknown(planned, init)]
    if image_cuda <= driver_cuda:
        return []
    if image_cuda[0] == driver_cuda[0] and forward_compat_supported(gpu_name):
        # minor-version compatibility: cuda_compatibility_warnings says its limits
        return []
    return [_unproven(driver_cuda, image_cuda, gpu_name, planned)]


def _unproven(
    driver_cuda: CudaVersion, image_cuda: CudaVersion, gpu_name: str, planned: str
) -> Problem:
    return Problem(
        found=f"image CUDA {format_cuda(image_cuda)} on a CUDA "
        f"{format_cuda(driver_cuda)} driver, {gpu_name}: {_compat_status(gpu_name)}",
        planned=planned,
        remedy="prove it with the CUDA init probe in the image (`docker run --rm --gpus all "
        "$IMG python -c \"import torch; torch.zeros(1, device='cuda')\"`), or "
        + _fix(driver_cuda, image_cuda, None),
    )


def _compat_status(gpu_name: str) -> str:
    if forward_compat_supported(gpu_name):
        return "needs forward compatibility (supported on this GPU), not proven by a probe"
    return (
        f"forward compatibility is not documented for {gpu_name}: prove it with the CUDA init probe"
    )


def _init_failed(init: CudaInit, planned: str, remedy: str) -> Problem:
    code = f"error {init.code} {init.name}" if init.code is not None else init.name
    return Problem(
        found=f"CUDA init fails: {code} ({init.evidence})", planned=planned, remedy=remedy
    )


_TAKE_COMPAT_OFF = (
    "remove /usr/local/cuda/compat from LD_LIBRARY_PATH / /etc/ld.so.conf.d in the image "
    "(or run with the driver's libcuda)"
)


def _init_remedy(
    init: CudaInit,
    driver_cuda: CudaVersion,
    image_cuda: CudaVersion | None,
    gpu_name: str,
    libs: CompatFacts | None,
) -> str:
    """The fix for the cause the facts show, first: the image/driver versions only where the
    image's CUDA is newer than the driver's (or unknown)."""
    fix = _fix(driver_cuda, image_cuda, init.wants_driver)
    native = image_cuda is not None and image_cuda <= driver_cuda
    if init.code == 802:
        return _FABRIC_MANAGER
    if init.code == 803:
        return _mismatch_remedy(fix, native, image_cuda is None, libs)
    if init.code == 804:
        return _refused_remedy(fix, native, gpu_name)
    return fix


# 802 on NVSwitch: no fabric manager of the driver's version (docs/checks.md#cuda-compatibility)
_FABRIC_MANAGER = (
    "the NVSwitch fabric is not initialised: the fabric manager is missing, stopped or at "
    "another version than the driver: `systemctl status nvidia-fabricmanager` (start and enable "
    "it), and `nv-fabricmanager --version` must equal `cat /proc/driver/nvidia/version`; "
    "install nvidia-fabricmanager of the driver's version if absent"
)


def _mismatch_remedy(fix: str, native: bool, unknown: bool, libs: CompatFacts | None) -> str:
    """803: the libcuda loaded is not the kernel module's. Only an image newer than the driver
    needs another libcuda (NVIDIA-NeMo/labs-molt pull 44: compat over a newer driver)."""
    if libs and libs.on_path and libs.compat_driver not in (None, libs.host_driver):
        lead = (
            f"the image's forward-compat libcuda {libs.compat_driver} is loaded over driver "
            f"{libs.host_driver}: {_TAKE_COMPAT_OFF}"
        )
        if native:
            return lead
        return f"{lead}; if the image needs a newer CUDA, {fix}" if unknown else f"{fix}; {lead}"
    if native:
        own = f" ({libs.host_driver})" if libs else ""
        return (
            f"the image's CUDA runs natively on this driver, so a libcuda other than the "
            f"driver's own{own} is loaded, most often the image's forward-compat one: "
            f"{_TAKE_COMPAT_OFF}; `ldconfig -p | grep libcuda` in the image shows which"
        )
    return f"{fix}; if /usr/local/cuda/compat is on the loader path, {_TAKE_COMPAT_OFF}"


def _refused_remedy(fix: str, native: bool, gpu_name: str) -> str:
    """804: forward compatibility was attempted on a GPU that refuses it."""
    if native:
        return (
            f"{gpu_name} refuses forward compatibility and the image's CUDA does not need it: "
            + _TAKE_COMPAT_OFF
        )
    if not forward_compat_supported(gpu_name):
        return (
            f"{gpu_name} does not support forward compatibility, which this image's CUDA needs "
            f"on this driver: {fix}"
        )
    return f"{fix} ({gpu_name} refused forward compatibility)"


def _cuda_unknown(planned: str, init: CudaInit | None) -> Problem:
    said = init.evidence if init is not None and init.evidence else "no CUDA init probe"
    return Problem(
        found=f"no CUDA version for the image (no /usr/local/cuda/version.json) and {said}",
        planned=planned,
        remedy="run the CUDA init probe in the image: `docker run --rm --gpus all $IMG python -c "
        "\"import torch; torch.zeros(1, device='cuda'); print(torch.version.cuda)\"`",
    )


def cuda_compatibility_warnings(
    driver_cuda: CudaVersion, image_cuda: CudaVersion | None, gpu_name: str
) -> list[Problem]:
    """What still may fail where a newer minor runs by minor-version compatibility: not a
    failure, for the report."""
    if image_cuda is None or image_cuda[0] != driver_cuda[0] or image_cuda <= driver_cuda:
        return []
    image, driver = format_cuda(image_cuda), format_cuda(driver_cuda)
    return [
        Problem(
            found=f"image CUDA {image} on a CUDA {driver} driver runs by minor-version "
            f"compatibility; {_compat_status(gpu_name)}",
            planned=f"image CUDA <= {driver}",
            remedy=f"PTX JIT and CUDA {image} features that need a newer driver fail with "
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION or 'operation not supported'; "
            + _fix(driver_cuda, image_cuda, None),
        )
    ]


def check_compat_libs(host_driver: str, compat_driver: str | None, on_path: bool) -> list[Problem]:
    """Forward-compat libraries are loaded only over an older driver: a newer host driver
    under an older compat libcuda gives CUDA error 803 (NVIDIA-NeMo/labs-molt pull 44)."""
    if not on_path or compat_driver is None:
        return []
    if version_key(host_driver) <= version_key(compat_driver):
        return []
    return [
        Problem(
            found=f"forward-compat libcuda {compat_driver} (/usr/local/cuda/compat) on the "
            f"loader path over the newer driver {host_driver}",
            planned="compat libraries only where the driver is older than the compat package",
            remedy="take /usr/local/cuda/compat off LD_LIBRARY_PATH (and out of "
            "/etc/ld.so.conf.d, then `ldconfig`) in the image or launch environment; "
            "CUDA init fails with 803 otherwise",
        )
    ]
