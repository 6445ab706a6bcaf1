"""What the benchmarks share: one timed run of the suite, timed only when green, its reports
kept out of the project; a process's CPU seconds as /proc says them."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def green_seconds(argv: list[str], cwd: Path) -> float:
    """Wall seconds of one run of ARGV in CWD; a red run is not timed: exit with its output."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(
            f"{' '.join(argv[:4])} in {cwd} failed, not timing a red run:\n{done.stdout[-3000:]}"
        )
    return elapsed


@contextmanager
def report_dir_option() -> Iterator[str]:
    """`--report-dir=` a temporary folder, removed on leaving: a timed run of the suite writes
    its reports as every run does (the same work timed), but the project's reports/ is left
    as the bench found it."""
    with tempfile.TemporaryDirectory(prefix="infergate-bench-reports-") as reports:
        yield f"--report-dir={reports}"


def green_pytest_seconds(argv: list[str], cwd: Path) -> float:
    """green_seconds of the pytest run ARGV, its reports in a temporary folder."""
    with report_dir_option() as option:
        return green_seconds([*argv, option], cwd)


def proc_cpu_seconds(stat: str, reaped: bool = True) -> float:
    """A process's CPU seconds from its /proc/PID/stat line: its own (all threads), user and
    system, and with REAPED its reaped children's (fields 14-17; the name in parentheses may
    hold spaces)."""
    fields = stat.rpartition(")")[2].split()
    return sum(int(f) for f in fields[11 : 15 if reaped else 13]) / os.sysconf("SC_CLK_TCK")
