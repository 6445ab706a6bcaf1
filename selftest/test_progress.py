"""Progress lines reach the terminal while the test that prints them still runs: in one
process and under xdist (`-n 2`), a real pytest in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from selftest.suite import ROOT

# The test that prints a line, then waits for the outer test to have read it on the run's
# terminal: were the line held until the test ends, it would wait for ever (the deadline is
# a backstop, the fail it ends in is the finding)
INNER = """
import time
from pathlib import Path

from infergate.fixtures.deploy import print_now


def test_says_then_waits(pytestconfig):
    print_now(pytestconfig, "progress: first")
    go = Path({go!r})
    deadline = time.monotonic() + 120
    while not go.exists():
        assert time.monotonic() < deadline, "nobody read 'progress: first' while this ran"
        time.sleep(0.05)
    print_now(pytestconfig, "progress: last")
"""


def run_inner(tmp_path: Path, *args: str) -> list[str]:
    """Run INNER under pytest with ARGS; once its first line is on the terminal, let it go
    on. The terminal's lines, in order."""
    go = tmp_path / "go"
    (tmp_path / "test_inner.py").write_text(INNER.format(go=str(go)))
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
            "--report-dir", str(tmp_path / "report"), "--rootdir", str(tmp_path), "-c",
            "/dev/null", "--inventory", str(ROOT / "inventories" / "lab.yaml"), *args,
            str(tmp_path / "test_inner.py")]  # fmt: skip
    seen = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=tmp_path) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            if "progress: first" in line:
                go.touch()
    return seen


@pytest.mark.parametrize("args", [("-p", "no:xdist"), ("-n", "2")], ids=["one process", "xdist"])
def test_a_progress_line_is_printed_while_its_test_runs(tmp_path: Path, args: tuple[str, ...]):
    seen = run_inner(tmp_path, *args)
    said = [ln for ln in seen if ln.startswith("progress: ")]
    assert said == ["progress: first", "progress: last"], "\n".join(seen)
    assert any("1 passed" in ln for ln in seen), "\n".join(seen)
    # the summary comes after the worker's last line: nothing is left unprinted at the end
    assert seen.index("progress: last") < next(i for i, ln in enumerate(seen) if "1 passed" in ln)
