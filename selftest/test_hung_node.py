"""Every remote command has a local deadline that ends its process group, here on the
controller itself (connection: local): a real process that `timeout` cannot end holds the
command's stdout open, as a process in state D on a hung NFS mount holds an ssh session."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from infergate.fixtures.hosts import KILL_AFTER_S, SSH_GRACE_S, NodeHung, Remote
from infergate.inventory import Ssh, parse_inventory

ROOT = Path(__file__).resolve().parents[1]
LAB = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))
LOCAL = dataclasses.replace(LAB.nodes[0], ssh=Ssh(connection="local"))


def escaping_sleeper(pid_file: Path, seconds: int) -> str:
    """A command whose child leaves `timeout`'s process group (setsid) but keeps stdout."""
    return f"setsid sh -c 'echo $$ > {pid_file}; exec sleep {seconds}' & sleep 0.2"


def test_a_command_that_outlives_timeout_is_named_at_the_local_deadline(tmp_path):
    remote = Remote(LOCAL, None, timeout_s=1)
    pid_file = tmp_path / "pid"
    start = time.monotonic()
    try:
        with pytest.raises(NodeHung) as hung:
            remote.run(escaping_sleeper(pid_file, 30))
        took = time.monotonic() - start
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
    deadline = 1 + KILL_AFTER_S + SSH_GRACE_S
    assert deadline <= took < deadline + 2, took
    assert str(hung.value).startswith(
        f"node1 (10.251.0.11) hung: ssh did not return within {deadline} s"
    )
    assert "fix: on the node, list processes in state D" in str(hung.value)
    start = time.monotonic()
    with pytest.raises(NodeHung, match=r"^node1 \(10\.251\.0\.11\) hung"):
        remote.run("true")
    assert time.monotonic() - start < 0.1, "the second command waited again"


def test_input_goes_to_the_command_stdin_not_its_argv():
    remote = Remote(LOCAL, None, timeout_s=5)
    done = remote.run("cat; tr '\\0' ' ' < /proc/$$/cmdline", input="sk-secret\n")
    assert done.stdout.startswith("sk-secret\n"), done.stdout
    assert "sk-secret" not in done.stdout.split("\n", 1)[1]
    assert (done.exit_status, done.rc, done.stderr) == (0, 0, "")


def test_the_node_timeout_still_ends_an_ordinary_slow_command():
    remote = Remote(LOCAL, None, timeout_s=0.5)
    done = remote.run("sleep 10")
    assert done.exit_status == 124  # GNU timeout's own status: the node ended it
    assert remote.run("echo again").stdout == "again\n"
