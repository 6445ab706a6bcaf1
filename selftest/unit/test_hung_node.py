"""Every remote command has a local deadline that ends its process group, here on the
controller itself (connection: local): a real process that `timeout` cannot end holds the
command's stdout open, as a process in state D on a hung NFS mount holds an ssh session. A
command that the node's `timeout` did end is named a timeout, with the key of its deadline."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from infergate.plan.model import Ssh, parse_inventory
from infergate.preflight.model_hash import hash_model
from infergate.preflight.per_node import PerNode
from infergate.remote.ssh import KILL_AFTER_S, SSH_GRACE_S, NodeHung, NodeTimedOut, Remote
from infergate.waiting import LOOK_AT

ROOT = Path(__file__).resolve().parents[2]
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
    assert time.monotonic() - start < 1, "the second command waited again"


def test_input_goes_to_the_command_stdin_not_its_argv():
    remote = Remote(LOCAL, None, timeout_s=5)
    done = remote.run("cat; tr '\\0' ' ' < /proc/$$/cmdline", input="sk-secret\n")
    assert done.stdout.startswith("sk-secret\n"), done.stdout
    assert "sk-secret" not in done.stdout.split("\n", 1)[1]
    assert (done.exit_status, done.stderr) == (0, "")


def test_the_node_timeout_still_ends_an_ordinary_slow_command():
    remote = Remote(LOCAL, None, timeout_s=0.5)
    done = remote.run("sleep 10")
    assert done.exit_status == 124  # GNU timeout's own status: the node ended it
    assert remote.run("echo again").stdout == "again\n"


def test_a_command_its_deadline_ended_is_named_a_timeout_not_read_as_partial_output():
    remote = Remote(LOCAL, None, timeout_s=0.5)
    with pytest.raises(NodeTimedOut) as ended:
        remote.read("echo partial; sleep 10", "the pings")
    assert str(ended.value) == (
        "node1 (10.251.0.11): the pings ran past its 0.5 s (thresholds.command_timeout_s) and "
        "was ended (exit 124): what it printed is partial\n"
        f"    fix: the node is slow or something on it hangs: look at {LOOK_AT}; "
        "raise thresholds.command_timeout_s if it is just slow"
    )
    assert remote.read("echo again", "the next").stdout == "again\n"  # not taken for hung


def test_a_model_hash_its_deadline_ended_names_the_plans_hash_key(tmp_path):
    """A model file that blocks its reader (a FIFO here, as a file on a hung mount blocks)
    keeps the real hashing script past the plan's deadline: the finding names the hash's own
    key, not the command deadline, and is not a JSON error on its partial output."""
    model = tmp_path / "model"
    model.mkdir()
    os.mkfifo(model / "model-00001-of-00001.safetensors")
    plan = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    plan["model"]["path"] = str(model)
    plan["thresholds"]["model_hash_timeout_s"] = 1
    inventory = parse_inventory(plan)
    remotes = {"node1": Remote(LOCAL, None, timeout_s=20)}
    (outcome,) = PerNode(remotes, hash_model(inventory, "full", print)).every().values()
    assert isinstance(outcome, NodeTimedOut)
    assert str(outcome).startswith(
        f"node1 (10.251.0.11): hashing every file of {model} ran past its 1 s "
        "(thresholds.model_hash_timeout_s) and was ended (exit 124)"
    )
    assert "look at the disk's read rate" in str(outcome)
