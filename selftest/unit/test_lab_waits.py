"""The lab's waits are infergate.waiting's, run here on real processes of this machine (no lab
needed): a process that ignores SIGTERM is killed once the stop's deadline passes."""

from __future__ import annotations

import subprocess
import time

from infergate.waiting import Deadline
from infergate_lab.procs import Proc, stop


def test_stop_waits_its_deadline_then_kills_what_ignores_sigterm():
    deaf = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; echo deaf; exec sleep 30"], stdout=subprocess.PIPE, text=True
    )
    assert deaf.stdout is not None
    assert deaf.stdout.readline() == "deaf\n"  # SIGTERM is ignored from here on, not before
    polite = subprocess.Popen(["sleep", "30"])
    procs = [Proc.of(deaf.pid), Proc.of(polite.pid)]
    start = time.monotonic()
    try:
        stop(procs, Deadline(0.5, "k"))
        took = time.monotonic() - start
    finally:
        deaf.kill()
        polite.kill()
        deaf.stdout.close()
    assert not any(p.alive() for p in procs)
    assert 0.5 <= took < 2, took  # the deadline, then the kill at once
    assert (deaf.wait(), polite.wait()) == (-9, -15)


def test_stop_returns_as_soon_as_everything_ended():
    polite = subprocess.Popen(["sleep", "30"])
    start = time.monotonic()
    stop([Proc.of(polite.pid)], Deadline(10, "k"))
    assert time.monotonic() - start < 1
    assert polite.wait() == -15
