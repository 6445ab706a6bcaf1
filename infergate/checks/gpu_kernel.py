"""What the kernel and the driver's libraries say about the GPUs: Xid and fatal NVRM lines in
the kernel log since boot (the probe's one `kernel-log` section: infergate.checks.kernel_log),
and NVML's "Driver/library version mismatch" (a driver upgraded without a reboot). Xid codes
are NVIDIA's (https://docs.nvidia.com/deploy/xid-errors/index.html).
"""

from __future__ import annotations

import re

from infergate.checks.kernel_log import KernelLog
from infergate.problems import Problem

# the NVML library the loader resolves, by its versioned file name (libnvidia-ml.so.580.95.05)
NVML_LIBRARY = (
    "ldconfig -p | sed -n 's/.*libnvidia-ml[.]so[.]1 .*=> //p' | "
    'while read -r f; do readlink -f "$f"; done'
)

# the kernel-log section's GPU lines, as its grep picks them
_GPU_LINE = re.compile(r"NVRM|Xid")
# Xid lines: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus."
_XID = re.compile(r"NVRM: Xid \((PCI:[0-9a-fA-F:.]+)\): (\d+)")
# NVRM faults without an Xid: the module refuses the libraries, or the GPU does not come up
_FATAL_NVRM = re.compile(r"NVRM: (API mismatch|.*fallen off the bus|.*RmInitAdapter failed)")
# "NVRM: API mismatch: the client has the version 570.153.02, but / NVRM: this kernel module
# has the version 570.144." over two lines (newer drivers name the client first)
_API_MISMATCH = re.compile(
    r"has the version ([\d.]+\d), but this kernel module has the version ([\d.]+\d)"
)
_PREFIX = re.compile(r"\s*(?:\[\s*[\d.]+\]\s*)?NVRM:\s*")


def check_kernel_gpu_log(log: KernelLog, window: str = "since boot") -> list[Problem]:
    """No Xid and no fatal NVRM line in the kernel log's lines of WINDOW (a log the probe may
    not read has no lines to judge: its `unreadable` says why)."""
    lines = tuple(line.strip() for line in log.lines if _GPU_LINE.search(line))
    xids = [line for line in lines if _XID.search(line)]
    fatal = [line for line in lines if _FATAL_NVRM.search(line) and line not in xids]
    if not xids and not fatal:
        return []
    codes = sorted({int(m[2]) for m in map(_XID.search, xids) if m})
    found = [f"{len(xids)} Xid line(s) (codes {', '.join(map(str, codes))})"] if xids else []
    found += [f"{len(fatal)} fatal NVRM line(s)"] if fatal else []
    last = (xids or fatal)[-1]
    return [
        Problem(
            found=f"{' and '.join(found)} in the kernel log {window}; last: {last[:240]}",
            planned=f"no Xid or fatal NVRM line {window}",
            remedy=_log_remedy(codes, lines),
        )
    ]


def _log_remedy(codes: list[int], lines: tuple[str, ...]) -> str:
    mismatch = _API_MISMATCH.search(" ".join(_PREFIX.sub(" ", line).strip() for line in lines))
    if mismatch:
        return (
            f"the kernel module ({mismatch[2]}) refuses the libraries ({mismatch[1]}): the "
            "driver was upgraded without a reboot; reboot the node (`sudo reboot`)"
        )
    return (
        "look each Xid up in NVIDIA's catalogue (https://docs.nvidia.com/deploy/xid-errors/) and "
        "read the context: `sudo dmesg -T | grep -B2 -A2 -E 'NVRM|Xid'`; a GPU that fell off "
        "the bus (79) or shows 48/63/64/94/95 needs a reset or a reboot, then "
        "`nvidia-smi -q -d ECC,ROW_REMAPPER`"
        + (f" (codes seen: {', '.join(map(str, codes))})" if codes else "")
    )


_SMI_MISMATCH = "Driver/library version mismatch"
_SMI_LIBRARY = re.compile(r"NVML library version: ([\d.]+)")
_LIB_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", re.MULTILINE)


def parse_nvml_library(text: str) -> str | None:
    """The version in the resolved NVML library's name, from the probe's `ldconfig -p | sed
    ... | readlink -f`.

    Sample line: ``/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04``
    """
    match = _LIB_VERSION.search(text)
    return match[1] if match else None


def check_nvml_mismatch(smi_output: str, module: str | None, library: str | None) -> list[Problem]:
    """NVML initialises: nvidia-smi's "Failed to initialize NVML: Driver/library version
    mismatch" (a driver upgraded without a reboot) is named as such, with the loaded kernel
    module's version (/proc/driver/nvidia/version) against the libraries'."""
    if _SMI_MISMATCH not in smi_output:
        return []
    said = _SMI_LIBRARY.search(smi_output)
    library = said[1] if said else library
    return [
        Problem(
            found=f"nvidia-smi: Failed to initialize NVML: {_SMI_MISMATCH} (kernel module "
            f"{module or 'unknown'}, NVML library {library or 'unknown'})",
            planned="the loaded kernel module and the NVIDIA libraries of one driver version",
            remedy="the driver was upgraded without a reboot, so the old kernel module is still "
            "loaded: reboot the node (`sudo reboot`); then `cat /proc/driver/nvidia/version` "
            "and `nvidia-smi` must show one version",
        )
    ]
