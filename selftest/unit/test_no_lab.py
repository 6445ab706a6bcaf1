"""selftest/unit reaches no lab: a test that asks ssh for a lab address, itself or through a
process it starts, fails, whether or not a lab is up (the refused ssh never leaves this
machine); a loopback address passes through to the real ssh. The lab tests, and only they,
live in selftest/lab/, beside the lab's fixtures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from selftest.suite import ROOT

UNIT = Path(__file__).resolve().parent
LAB_MARK = re.compile(r"pytest\.mark\.lab\b")

REACHING = """
import subprocess

BATCH = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=2"]


def ssh(*argv):
    return subprocess.run(["ssh", *BATCH, *argv], capture_output=True, text=True, timeout=30)


def test_the_suites_way_a_node_alias_in_an_ssh_config(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host node1\\n  HostName 10.251.0.11\\n")
    ssh("-F", str(config), "-T", "--", "node1", "true")


def test_a_lab_address_named_outright_its_command_unread():
    ssh("-p", "22", "root@10.252.0.12", "grep", "-G", "x")


def test_a_jump_through_the_lab():
    ssh("-J", "root@10.251.0.11", "-p", "9", "root@127.0.0.1", "true")


def test_a_closed_loopback_port_is_the_real_ssh():
    done = ssh("-p", "9", "root@127.0.0.1", "true")
    assert "Connection refused" in done.stderr, done.stderr


def test_ssh_G_prints_a_lab_address_without_going_there():
    done = ssh("-G", "-p", "22", "root@10.251.0.11")
    assert "hostname 10.251.0.11" in done.stdout.splitlines(), done.stderr
"""


def test_a_unit_test_that_asks_ssh_for_a_lab_fails(pytester: pytest.Pytester) -> None:
    pytester.makeconftest((UNIT / "conftest.py").read_text())
    pytester.makepyfile(test_reaching=REACHING)
    # -rN: no short summary, whose lines repeat the errors (whole where CI is set)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:infergate", "-rN")
    result.assert_outcomes(passed=5, errors=3)
    output = result.stdout.str()
    assert output.count("a unit test asked ssh for a lab") == 3, output
    for where in ("hostname 10.251.0.11", "hostname 10.252.0.12", "proxyjump root@[10.251.0.11]"):
        assert where in output, output


def test_lab_tests_live_in_selftest_lab_and_only_there() -> None:
    files = sorted((ROOT / "selftest").glob("*/test_*.py"))
    marked = [p.relative_to(ROOT) for p in files if LAB_MARK.search(p.read_text())]
    assert marked == [p.relative_to(ROOT) for p in files if p.parent.name == "lab"]
