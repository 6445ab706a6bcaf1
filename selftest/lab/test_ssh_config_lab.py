"""SSH trust against the lab's real sshd: a plan that does not verify host keys records each
node's first key in a file of its own and refuses a changed one, and a master opened under
lax trust never serves a strict run. The user's own ssh_config reaches a node the plan names
only by the user's alias, with a key that only that file names (the operator's option)."""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infergate.fixtures import hosts
from infergate.plan.model import Inventory, parse_inventory
from infergate.remote.ssh import NodeUnreachable, Remote
from infergate.remote.ssh_config import ssh_config
from infergate_lab import layout
from selftest.suite import run_suite

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
LAB = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))
USER_KNOWN_HOSTS = Path.home() / ".ssh" / "known_hosts"


def plan_with(**ssh: object) -> Inventory:
    node = dataclasses.replace(LAB.nodes[1], ssh=dataclasses.replace(LAB.nodes[1].ssh, **ssh))
    return dataclasses.replace(LAB, nodes=(node,))


@pytest.fixture
def masters(lab) -> Iterator[Path]:
    """A short private directory for master sockets; every master in it ended afterwards."""
    with tempfile.TemporaryDirectory(prefix="ig-trust-") as tmp:
        yield Path(tmp)
        for config in Path(tmp).glob("config-*"):
            end_master(config)


def end_master(config: Path) -> None:
    exit_master = ["ssh", "-F", str(config), "-O", "exit", "node2"]
    subprocess.run(exit_master, capture_output=True, timeout=10, check=False)


def remote(plan: Inventory, masters: Path, name: str, own: Path) -> Remote:
    config = masters / f"config-{name}"
    config.write_text(ssh_config(plan, masters, persist_s=30, plan_known_hosts=own))
    return Remote(plan.nodes[0], config, 10, connect_timeout_s=3)


def user_known_hosts() -> bytes | None:
    return USER_KNOWN_HOSTS.read_bytes() if USER_KNOWN_HOSTS.exists() else None


def test_unverified_plan_pins_the_first_key_in_its_own_file(masters):
    own, before = masters / "known_hosts-plan", user_known_hosts()
    lax = plan_with(verify_host_key=False, known_hosts=None)
    assert remote(lax, masters, "first", own).run("hostname").stdout == "node2\n"
    assert own.read_text().startswith("10.251.0.12 ssh-ed25519 ")  # the first key, recorded
    assert user_known_hosts() == before  # the user's own file is never written
    end_master(masters / "config-first")  # the same trust would reuse its master
    # the node's key "changes": the one recorded for it is now node1's
    lab_known = Path(LAB.nodes[0].ssh.known_hosts or "").read_text().splitlines()
    node1 = next(line for line in lab_known if line.startswith("10.251.0.11 "))
    own.write_text(node1.replace("10.251.0.11", "10.251.0.12", 1) + "\n")
    with pytest.raises(
        NodeUnreachable,
        match=r"^node2 \(10\.251\.0\.12\) is unreachable over "
        "SSH: the host key CHANGED",
    ):
        remote(lax, masters, "changed", own).run("hostname")


def test_a_master_opened_by_a_lax_plan_does_not_serve_a_strict_one(masters):
    own = masters / "known_hosts-plan"
    lax = plan_with(verify_host_key=False, known_hosts=None)
    assert remote(lax, masters, "lax", own).run("hostname").stdout == "node2\n"  # master up
    empty = masters / "known_hosts-empty"
    empty.write_text("")
    strict = plan_with(verify_host_key=True, known_hosts=str(empty))
    with pytest.raises(
        NodeUnreachable,
        match=r"^node2 \(10\.251\.0\.12\) is unreachable over "
        "SSH: no host key for 10.251.0.12 in ",
    ):
        remote(strict, masters, "strict", own).run("hostname")


def test_testinfra_modules_reach_the_node_through_the_same_config(masters):
    host = hosts.testinfra_host(remote(plan_with(), masters, "testinfra", masters / "unused"))
    assert host.run("hostname").stdout == "node2\n"
    assert host.file("/proc/sys/kernel/hostname").content_string == "node2\n"


HOST_TESTS = ("-m", "preflight and not image", "-k", "test_host", "--ssh-persist=0")


@pytest.fixture
def users_key(lab, tmp_path: Path) -> Iterator[Path]:
    """A fresh key pair that the lab's sshd accepts for the duration of the test (the nodes
    share the lab's authorized_keys file), and no longer after it."""
    key = tmp_path / "id_users"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    before = layout.AUTHORIZED_KEYS.read_text()
    layout.AUTHORIZED_KEYS.write_text(before + key.with_suffix(".pub").read_text())
    try:
        yield key
    finally:
        layout.AUTHORIZED_KEYS.write_text(before)


def alias_plan(tmp_path: Path) -> Path:
    """The lab plan with node2 at the user's alias `spark-b` and no key of the plan's (node1
    keeps the lab's: the cluster lock, on the machine both share, is taken through it)."""
    plan = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    plan["nodes"][1]["address"] = "spark-b"
    del plan["nodes"][1]["ssh"]["key"]
    path = tmp_path / "plan-alias.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def test_a_node_known_only_by_the_users_alias_and_key_passes_the_host_preflight(
    users_key, tmp_path, pytester, monkeypatch
):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # no agent: only the file's key
    user = tmp_path / "my ssh" / "config"
    user.parent.mkdir()
    user.write_text(f"""\
Host spark-b
  HostName 10.251.0.12
Host 10.251.0.12
  IdentityFile "{users_key}"
""")
    user.chmod(0o600)
    plan, operators = alias_plan(tmp_path), f"--ssh-user-config={user}"
    green = run_suite(pytester, *HOST_TESTS, operators, inventory=plan)
    assert {t for t in green.outcomes if t.endswith("[node2]")} == {
        "test_host.py::test_ssh_reachable_facts_gathered[node2]",
        "test_host.py::test_node_tools_present[node2]",
        "test_host.py::test_docker_engine_answers[node2]",
    }, green.output
    assert green.red() == set(), green.output
    user.write_text("Host spark-b\n  HostName 10.251.0.12\n")  # the alias, not the key
    keyless = run_suite(pytester, *HOST_TESTS, operators, inventory=plan)
    test = "test_host.py::test_ssh_reachable_facts_gathered[node2]"
    refused = keyless.message(test)
    assert "node2 (spark-b): 1 problem(s)\n" in refused, keyless.output
    assert "IG-SSH-UNREACHABLE found unreachable over SSH: root@spark-b refused the key" in refused
    red = run_suite(pytester, *HOST_TESTS, "--ssh-user-config=none", inventory=plan)
    assert test in red.red(), red.output
    unresolved = "found unreachable over SSH: the name spark-b does not resolve"
    assert unresolved in red.message(test), red.output
