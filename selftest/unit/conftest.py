"""Unit selftests: no lab. The lab's fixtures live in selftest/lab/, out of reach here, and
every test runs with an `ssh` first on its PATH (so in every process it starts) that refuses
a lab address and fails the test that asked, whether or not a lab is up. A unit test that
runs the suite uses a plan on a closed loopback port (selftest.suite.closed_plan)."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

REACHED = "INFERGATE_SELFTEST_LAB_REACHED"  # the file where the shim notes what it refused
# `ssh -G` only prints the configuration: it passes. Else where ssh would go, as ssh itself
# resolves it (its config, -p, user@, -J); the patterns are the lab's management and fabric
# networks (infergate_lab.layout). getopts stops at the destination: its command is not read.
SHIM = """#!/bin/sh
while getopts 1246ab:c:e:fgi:kl:m:no:p:qstvxAB:CD:E:F:GI:J:KL:MNO:P:Q:R:S:TVw:W:XYy opt; do
    [ "$opt" = G ] && exec REAL "$@"
done 2>/dev/null
where=$(REAL -G "$@" 2>/dev/null | grep -E '^(hostname|proxyjump) ' | tr '\\n' ' ')
case "$where" in
*10.251.*|*10.252.*)
    echo "ssh $*: $where" >> "$INFERGATE_SELFTEST_LAB_REACHED"
    echo "ssh: refused by selftest/unit: a unit test may not reach a lab ($where)" >&2
    exit 255;;
esac
exec REAL "$@"
"""
_tests = itertools.count()


@pytest.fixture(scope="session")
def lab_refusing_ssh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose `ssh` refuses the lab's addresses and runs the real ssh otherwise."""
    folder = tmp_path_factory.mktemp("unit-ssh")
    shim = folder / "ssh"
    shim.write_text(SHIM.replace("REAL", shutil.which("ssh") or "/usr/bin/ssh"))
    shim.chmod(0o755)
    return folder


@pytest.fixture(autouse=True)
def no_lab(lab_refusing_ssh: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fails the test if it, or a process it started, asked ssh for a lab address."""
    reached = lab_refusing_ssh / f"reached-{next(_tests)}"
    monkeypatch.setenv("PATH", f"{lab_refusing_ssh}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(REACHED, str(reached))
    yield
    if reached.exists():
        pytest.fail(f"a unit test asked ssh for a lab:\n{reached.read_text()}", pytrace=False)
