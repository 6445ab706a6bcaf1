"""A rank's memory bandwidth: a GPU's from its maker's figure, looked up by the name
nvidia-smi gives it; a CPU node's measured by a short copy on the node (COPY_SCRIPT).

The copy is single-threaded, as a lab rank's decode is, and runs on every node at once (lab
nodes share one machine's memory, as their ranks do while serving): docs/performance.md#roofline.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9

# (words of nvidia-smi's name, GB/s, source): the first match wins, so the specific first
GPU_BANDWIDTH: tuple[tuple[str, float, str], ...] = (
    ("GB10", 273, "https://www.nvidia.com/en-us/products/workstations/dgx-spark/"),
    ("H200", 4800, "https://www.nvidia.com/en-us/data-center/h200/"),
    ("H100 NVL", 3900, "https://www.nvidia.com/en-us/data-center/h100/"),
    ("H100 PCIe", 2000, "https://www.nvidia.com/en-us/data-center/h100/"),
    ("H100", 3350, "https://www.nvidia.com/en-us/data-center/h100/"),  # SXM: 80GB HBM3
    ("B200", 8000, "https://www.nvidia.com/en-us/data-center/dgx-b200/"),
    ("A100-SXM4-80GB", 2039, "https://www.nvidia.com/en-us/data-center/a100/"),
    ("A100 80GB PCIe", 1935, "https://www.nvidia.com/en-us/data-center/a100/"),
    ("A100", 1555, "https://www.nvidia.com/en-us/data-center/a100/"),  # the 40GB cards
    ("L40S", 864, "https://www.nvidia.com/en-us/data-center/l40s/"),
    ("L4", 300, "https://www.nvidia.com/en-us/data-center/l4/"),
    (
        "RTX PRO 6000 Blackwell",
        1792,
        "https://www.nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/",
    ),
)

COPY_MIB = 256  # well past any CPU cache
COPY_REPEATS = 5  # the best of these: the first also faults the pages in
# python3's stdlib only (a node has no numpy); memoryview assignment is one memmove
COPY_SCRIPT = f"""
import time
n = {COPY_MIB} << 20
src, dst = bytearray(b"x") * n, memoryview(bytearray(n))  # src touched: no zero page
best = 0.0
for _ in range({COPY_REPEATS}):
    t = time.perf_counter()
    dst[:] = src
    best = max(best, 2 * n / (time.perf_counter() - t))
print("copy_bytes_per_s", round(best))
"""


@dataclass(frozen=True)
class Bandwidth:
    """One rank's memory bandwidth, and where the figure comes from."""

    gb_s: float
    source: str


def gpu_bandwidth(name: str) -> Bandwidth | None:
    """The maker's figure for the GPU nvidia-smi names NAME; None for one not in the table.

    Sample: ``NVIDIA GB10`` (selftest/data/gb10/query-gpu-index-name-memory.csv)."""
    for words, gb_s, url in GPU_BANDWIDTH:
        if words.lower() in name.lower():
            return Bandwidth(gb_s, f"{name}: {gb_s:g} GB/s ({url})")
    return None


def parse_copy(text: str) -> float:
    """COPY_SCRIPT's output in GB/s (bytes read plus written per second, as STREAM's copy
    counts them). Sample: ``copy_bytes_per_s 10483920011``. Raises ValueError."""
    for line in text.splitlines():
        name, _, number = line.partition(" ")
        if name == "copy_bytes_per_s":
            return float(number) / GB
    raise ValueError(f"no copy_bytes_per_s line in {text.strip()[-200:]!r}")
