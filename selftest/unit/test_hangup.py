"""The output gone mid-run: a child process holds the signals as the deploy's teardown
does, on a real pty whose master is then closed, or on a pipe whose reader has ended; its
handler must not raise (EIO, EPIPE) and the removal must run to its end. A progress line to
a gone reader is dropped. The lab proves it on the real suite (test_hangup_lab.py)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from selftest.suite import ROOT

HELD_LINE = "SIGHUP: removing this run's containers first\n"
# the deploy's teardown in small: a removal that ends when the parent says so
TEARDOWN = """
import sys, time
from pathlib import Path
from infergate.interrupts import sigint_deferred
folder = Path(sys.argv[1])
try:
    with sigint_deferred(folder / "deploy.log"):
        print("removing", flush=True)
        while not (folder / "go").exists():
            time.sleep(0.05)
        if sys.argv[2:]:
            print("a line after the hangup", flush=True)
        (folder / "removed").write_text("")
except KeyboardInterrupt:
    (folder / "interrupted").write_text("")
"""


# a test of the real plugin that prints progress after its reader has gone
PRINTS_AFTER = """
import pathlib, time
from infergate.fixtures.progress import print_now

def test_prints_on(pytestconfig):
    print_now(pytestconfig, "started")
    while not pathlib.Path("closed").exists():
        time.sleep(0.05)
    for _ in range(3):
        print_now(pytestconfig, "a line nobody reads")
    pathlib.Path("printed").write_text("")
"""


def read_until(fd: int, wanted: bytes, timeout_s: float = 30) -> bytes:
    seen, end = b"", time.monotonic() + timeout_s
    while wanted not in seen and time.monotonic() < end:
        if select.select([fd], [], [], 0.1)[0]:
            seen += os.read(fd, 4096)
    assert wanted in seen, seen
    return seen


def wait_for_text(path: Path, text: str, timeout_s: float = 10) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never said {text!r}")


def finished(child: subprocess.Popen[bytes], folder: Path) -> None:
    """The removal ran to its end, then the held signal ended the block."""
    (folder / "go").write_text("")
    assert child.wait(timeout=10) == 0, (folder / "stderr").read_text()
    assert (folder / "removed").exists(), (folder / "stderr").read_text()
    assert (folder / "interrupted").exists()


def test_a_closed_terminal_during_the_removal_neither_breaks_it_nor_ends_it(tmp_path):
    """The child is a session leader on a real pty: closing the master sends it SIGHUP. A
    second SIGHUP is ignored, as under nohup, and a write after the hangup is harmless."""
    master, slave = os.openpty()
    child = subprocess.Popen(
        ["setsid", "--ctty", sys.executable, "-c", TEARDOWN, str(tmp_path), "print"],
        stdin=slave,
        stdout=slave,
        stderr=(tmp_path / "stderr").open("w"),
    )
    os.close(slave)
    read_until(master, b"removing\r\n")
    os.close(master)
    wait_for_text(tmp_path / "deploy.log", HELD_LINE)
    child.send_signal(signal.SIGHUP)
    finished(child, tmp_path)
    assert (tmp_path / "deploy.log").read_text() == HELD_LINE


def test_a_signal_with_the_output_pipe_closed_does_not_break_the_removal(tmp_path):
    """SIGTERM to a child whose stdout's reader has gone (a CI log collector that ended)."""
    child = subprocess.Popen(
        [sys.executable, "-c", TEARDOWN, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "stderr").open("w"),
    )
    assert child.stdout is not None
    read_until(child.stdout.fileno(), b"removing\n")  # print writes the newline apart
    child.stdout.close()
    child.send_signal(signal.SIGTERM)
    wait_for_text(tmp_path / "deploy.log", "SIGTERM: removing this run's containers first\n")
    finished(child, tmp_path)


def test_progress_lines_to_a_reader_gone_are_dropped_and_the_run_goes_on(tmp_path):
    """`infergate deploy | tee` whose tee has ended: a progress line meets EPIPE."""
    (tmp_path / "test_prints.py").write_text(PRINTS_AFTER)
    plan = ROOT / "inventories" / "h200-device.yaml"  # any plan: nothing reaches its node
    argv = [sys.executable, "-m", "pytest", f"--inventory={plan}", "-p", "no:cacheprovider"]
    child = subprocess.Popen(
        [*argv, "test_prints.py"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "stderr").open("w"),
    )
    assert child.stdout is not None
    read_until(child.stdout.fileno(), b"started\n")
    child.stdout.close()
    (tmp_path / "closed").write_text("")
    child.wait(timeout=60)
    assert (tmp_path / "printed").exists(), (tmp_path / "stderr").read_text()
