"""The lab selftests' guard (selftest.lab_guard) with real processes on a lock file of this
test's own, never the lab's: a second run waits for the first and names it; a process the
holder started passes through (a pytest a lab selftest runs); a stranger that inherited the
holder's HELD_BY still waits."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selftest.lab_guard import HELD_BY
from selftest.suite import ROOT

# Takes the guard on argv[1], says "got <pid>", runs the command in argv[3:] if any (a
# child that takes it too), then holds until the file argv[2] exists
HOLDER = """
import os, subprocess, sys, time
from pathlib import Path
from selftest.lab_guard import lab_guard

lock, release, child = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
with lab_guard(lock, lambda line: print(line, flush=True)):
    print(f"got {os.getpid()}", flush=True)
    if child:
        print("child " + subprocess.run(child, capture_output=True, text=True, timeout=60,
                                        check=True).stdout.replace("\\n", " | "), flush=True)
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
"""
DEADLINE_S = 60  # a backstop: each wait below ends on a line or a file, not on a time


def holder(lock: Path, release: Path, *child: str, env: dict[str, str] | None = None):
    argv = [sys.executable, "-c", HOLDER, str(lock), str(release), *child]
    env = {**(env or os.environ), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)


def read_until(proc: subprocess.Popen[str], start: str) -> list[str]:
    """PROC's lines up to and including the first that starts with START."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line.strip())
        if line.startswith(start):
            return seen
    raise AssertionError(f"no line starting {start!r}: {seen}")


@contextmanager
def running(*procs: subprocess.Popen[str]) -> Iterator[None]:
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(DEADLINE_S)


def test_a_second_run_waits_for_the_first_and_names_it(tmp_path: Path) -> None:
    lock, release = tmp_path / "lab.lock", tmp_path / "release"
    first = holder(lock, release)
    with running(first):
        (got,) = read_until(first, "got ")
        second = holder(lock, tmp_path / "release2")
        with running(second):
            waiting = read_until(second, "lab selftests: waiting")
            assert len(waiting) == 1
            assert waiting[0].startswith(
                f"lab selftests: waiting for {lock}, held by pid {first.pid} ("
            )
            assert " since " in waiting[0]
            assert got == f"got {first.pid}"
            assert second.poll() is None  # still waiting: the first holds it until released
            release.touch()
            assert first.wait(DEADLINE_S) == 0
            (got_second,) = read_until(second, "got ")
            assert got_second == f"got {second.pid}"
            (tmp_path / "release2").touch()
            assert second.wait(DEADLINE_S) == 0


def test_a_process_the_holder_started_passes_through(tmp_path: Path) -> None:
    lock, release = tmp_path / "lab.lock", tmp_path / "release"
    child = [sys.executable, "-c", HOLDER, str(lock), str(release)]
    release.touch()  # the child goes at once; the holder too, once the child is back
    first = holder(lock, release, *child)
    with running(first):
        lines = read_until(first, "child ")
        assert lines[0] == f"got {first.pid}"
        assert lines[1].startswith("child got "), lines  # no waiting line before it
        assert first.wait(DEADLINE_S) == 0


def test_a_stranger_with_the_holders_variable_still_waits(tmp_path: Path) -> None:
    lock, release = tmp_path / "lab.lock", tmp_path / "release"
    first = holder(lock, release)
    with running(first):
        read_until(first, "got ")
        stranger = holder(lock, release, env={**os.environ, HELD_BY: f"{first.pid}:{lock}"})
        with running(stranger):
            assert read_until(stranger, "lab selftests: waiting")[0].startswith(
                f"lab selftests: waiting for {lock}, held by pid {first.pid} "
            )
            release.touch()
            assert read_until(stranger, "got ") == [f"got {stranger.pid}"]
            assert stranger.wait(DEADLINE_S) == 0
