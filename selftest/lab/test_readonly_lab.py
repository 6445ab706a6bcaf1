"""The preflight's promise to be read-only on the nodes, for real in the lab: what it must
write on a node for a moment is gone again, also when its deadline ends it."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from ipaddress import IPv4Address
from pathlib import Path

import pytest
import yaml

from infergate.checks.network import ping_command
from infergate.plan.model import parse_inventory
from infergate.remote.ssh import Remote
from infergate.remote.ssh_config import ssh_config
from infergate_lab import Lab
from selftest.suite import run_suite

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
LAB = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))
SILENT = IPv4Address("10.252.0.99")  # on node1's fabric subnet, held by no node: no reply


@pytest.fixture
def node1(lab: Lab) -> Iterator[Remote]:
    with tempfile.TemporaryDirectory(prefix="ig-ro-") as tmp:  # short: a socket path
        config = Path(tmp, "ssh_config")
        config.write_text(ssh_config(LAB, Path(tmp), persist_s=1))
        yield Remote(LAB.nodes[0], config, 10, connect_timeout_s=3)


def ping_dirs(remote: Remote) -> set[str]:
    """Directories in the node's temporary directory that hold a ping's output."""
    find = 'grep -l "^PING " "${TMPDIR:-/tmp}"/*/0 2>/dev/null | xargs -r -n1 dirname'
    return set(remote.run(find).stdout.split())


def test_ping_directory_is_removed_when_the_deadline_ends_the_pings(node1):
    before = ping_dirs(node1)
    # the pings to a silent address take ~1.2 s; the node's deadline ends them at 0.5 s
    done = node1.run(ping_command("fab0", [IPv4Address("10.252.0.12"), SILENT]), timeout_s=0.5)
    assert done.exit_status == 124, (done.exit_status, done.stdout, done.stderr)
    assert ping_dirs(node1) - before == set()


def test_ping_directory_is_removed_after_a_full_run(node1):
    before = ping_dirs(node1)
    done = node1.run(ping_command("fab0", [IPv4Address("10.252.0.12")]))
    assert "2 packets transmitted, 2 received" in done.stdout, done.stdout
    assert ping_dirs(node1) - before == set()


# Where a preflight could write on a node: the user's home (the caches), shared memory, the
# temporary directories (only infergate's own names: the lab shares this machine's /tmp, so
# the controller's SSH masters and any suite run's scratch folder, another test's too, are
# left out), /etc and the model. The Docker engine's state is judged by its containers and
# images.
WRITES = (
    "find $HOME /dev/shm /var/tmp /etc /srv -xdev -newermt @{since} 2>/dev/null; "
    "find ${{TMPDIR:-/tmp}} -maxdepth 1 -newermt @{since} -name 'infergate*' "
    "! -name 'infergate-ssh-*' ! -name 'infergate-lab*' ! -name 'infergate-run-*'"
)
DOCKER = "docker ps -a --format '{{.ID}} {{.Names}}'; docker images -q --no-trunc | sort"


def test_a_preflight_of_an_unchanged_cluster_writes_nothing_on_the_nodes(engine_lab, pytester):
    """The second preflight (the caches are warm from the first) leaves every node as it was:
    no file, no shared memory segment, no container and no image more or less."""
    run_suite(pytester, "-m", "preflight")  # the caches of an earlier run
    docker = {n: engine_lab.ssh(n, [DOCKER]).stdout for n in ("node1", "node2")}
    since = time.time()
    time.sleep(1.1)  # find compares whole seconds on some file systems
    run = run_suite(pytester, "-m", "preflight")
    assert run.red() == set(), run.output
    for node in ("node1", "node2"):
        written = engine_lab.ssh(node, [WRITES.format(since=since)]).stdout.split()
        assert written == [], f"{node}: the preflight wrote {written}"
        assert engine_lab.ssh(node, [DOCKER]).stdout == docker[node]
