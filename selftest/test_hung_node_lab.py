"""A hung node cannot hang the run, for real in the lab: on node2 a process that the node's
`timeout` cannot end keeps the ssh session's stdout open (as a process in state D on a hung
NFS mount does), over the lab's real sshd. node2 is named at its local deadline, node1 is
read all the same, and the next command to node2 fails at once."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fixtures.facts import on_every_node
from fixtures.hosts import KILL_AFTER_S, SSH_GRACE_S, NodeHung, Remote, ssh_config
from infergate.inventory import parse_inventory
from infergate.lab import Lab

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[1]
PID_FILE = "/tmp/infergate-selftest-hang.pid"  # on node2
COMMAND_S, CONNECT_S = 2, 3
# the child leaves `timeout`'s process group (setsid) and keeps the session's stdout
HANG = f"setsid sh -c 'echo $$ > {PID_FILE}; exec sleep 60' & sleep 0.2"


@pytest.fixture
def remotes(lab: Lab) -> Iterator[dict[str, Remote]]:
    plan = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))
    with tempfile.TemporaryDirectory(prefix="ig-hang-") as tmp:  # short: a socket path
        config = Path(tmp, "ssh_config")
        config.write_text(ssh_config(plan, Path(tmp), persist_s=1))
        yield {n.name: Remote(n, config, COMMAND_S, CONNECT_S) for n in plan.nodes}
    done = lab.ssh("node2", [f"kill $(cat {PID_FILE}) && rm {PID_FILE}"])
    assert done.returncode == 0, f"the hang's process on node2 was not there: {done.stderr}"


def test_hung_node_is_named_at_its_deadline_and_the_other_is_read(remotes):
    def task(remote: Remote) -> str:
        return remote.run("hostname" if remote.node.name == "node1" else HANG).stdout.strip()

    start = time.monotonic()
    outcomes = on_every_node(remotes, task)
    took = time.monotonic() - start
    deadline = COMMAND_S + KILL_AFTER_S + CONNECT_S + SSH_GRACE_S
    assert outcomes["node1"] == "node1"
    hung = outcomes["node2"]
    assert isinstance(hung, NodeHung), hung
    assert str(hung).startswith(f"node2 (10.251.0.12) hung: ssh did not return within {deadline} s")
    assert took < deadline + 3, f"{took:.1f} s for a {deadline} s deadline"
    start = time.monotonic()
    with pytest.raises(NodeHung, match=r"^node2 \(10\.251\.0\.12\) hung"):
        remotes["node2"].run("true")
    assert time.monotonic() - start < 0.1, "the second command to node2 waited again"
    assert remotes["node1"].run("hostname").stdout == "node1\n"
