"""What the preflight benchmarks share: one timed run of the suite, timed only when green."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def green_seconds(argv: list[str], cwd: Path) -> float:
    """Wall seconds of one run of ARGV in CWD; a red run is not timed: exit with its output."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])} in {cwd} failed, not timing a red run:\n"
                 f"{done.stdout[-3000:]}")  # fmt: skip
    return elapsed
