"""The ssh_config made from the inventory, read back by the real ssh client (`ssh -G`)."""

import dataclasses
import subprocess
from pathlib import Path

import pytest
import yaml

from infergate.fixtures.hosts import connections, ssh_config
from infergate.inventory import Inventory, parse_inventory
from infergate.ssh_config import SshConfigError, plan_known_hosts, plan_ssh_config, ssh_command

INVENTORIES = Path(__file__).resolve().parents[1] / "inventories"


def effective(config: Path, host: str) -> dict[str, str]:
    """What ssh itself would use for `host`: `ssh -G` prints its resolved options."""
    out = subprocess.run(
        ["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, check=True
    ).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def test_lab_config_verifies_host_keys_with_the_lab_known_hosts(tmp_path):
    inv = parse_inventory(yaml.safe_load((INVENTORIES / "lab.yaml").read_text()))
    config = tmp_path / "ssh_config"
    config.write_text(ssh_config(inv, tmp_path))
    opts = effective(config, "node2")
    assert opts["hostname"] == "10.251.0.12"
    assert opts["user"] == "root"
    assert opts["stricthostkeychecking"] in ("true", "yes")
    assert opts["userknownhostsfile"] == "/var/lib/infergate-lab/ssh/known_hosts"
    assert opts["identityfile"] == "/var/lib/infergate-lab/ssh/id_ed25519"
    assert opts["batchmode"] == "yes"
    assert opts["connecttimeout"] == "3"
    assert opts["controlpath"].startswith(str(tmp_path))


def test_sparks_config_jumps_through_spark1(tmp_path):
    inv = parse_inventory(yaml.safe_load((INVENTORIES / "two-sparks-vllm.yaml").read_text()))
    config = tmp_path / "ssh_config"
    config.write_text(ssh_config(inv, tmp_path))
    assert effective(config, "spark2")["proxyjump"] == "spark1"
    assert effective(config, "spark2")["user"] == "aurora"
    assert "proxyjump" not in effective(config, "spark1")


LAB = parse_inventory(yaml.safe_load((INVENTORIES / "lab.yaml").read_text()))


def plan_with(**ssh: object) -> Inventory:
    """The lab plan with node1's ssh settings replaced (past the plan's own validation: these
    are the values it must refuse, and the ssh_config must refuse them again)."""
    node = dataclasses.replace(LAB.nodes[0], ssh=dataclasses.replace(LAB.nodes[0].ssh, **ssh))
    return dataclasses.replace(LAB, nodes=(node, LAB.nodes[1]))


def written(tmp_path: Path, plan: Inventory, **kw: object) -> Path:
    config = tmp_path / "ssh_config"
    config.write_text(ssh_config(plan, tmp_path, **kw))
    return config


def test_a_key_path_with_a_space_or_percent_reaches_ssh_whole(tmp_path):
    config = written(tmp_path, plan_with(key="/keys/my key%d", known_hosts="/k/known hosts"))
    opts = effective(config, "node1")
    # -G prints it before token expansion: ssh reads %% as one literal % when it opens it
    assert opts["identityfile"] == "/keys/my key%%d"
    assert opts["userknownhostsfile"] == "/k/known hosts"
    assert effective(config, "node2")["identityfile"] == "/var/lib/infergate-lab/ssh/id_ed25519"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("key", "/k/id\n  ProxyCommand id"),
        ("user", "root\n  ProxyCommand id"),
        ("known_hosts", '/k/known"hosts'),
        ("jump", "bastion\n  ProxyCommand id"),
        ("jump", "a@b:22,c"),
        ("jump", "ssh://bastion"),
    ],
)
def test_a_value_that_would_add_an_option_is_refused_naming_its_key(tmp_path, field, value):
    with pytest.raises(SshConfigError, match=rf"^nodes\[0\]\.ssh\.{field} = "):
        ssh_config(plan_with(**{field: value}), tmp_path)


def test_a_node_name_that_is_a_host_pattern_is_refused(tmp_path):
    plan = dataclasses.replace(LAB, nodes=(dataclasses.replace(LAB.nodes[0], name="node*"),))
    with pytest.raises(SshConfigError, match=r"^nodes\[0\]\.name = 'node\*'"):
        ssh_config(plan, tmp_path)


def test_unverified_host_keys_are_recorded_once_in_the_plans_own_file(tmp_path):
    own = tmp_path / "known_hosts-lab"
    config = written(
        tmp_path, plan_with(verify_host_key=False, known_hosts=None), plan_known_hosts=own
    )
    opts = effective(config, "node1")
    assert opts["stricthostkeychecking"] == "accept-new"  # a changed key is still refused
    assert opts["userknownhostsfile"] == str(own)  # never the user's ~/.ssh/known_hosts


def test_master_sockets_differ_by_trust_so_a_lax_master_serves_no_strict_run(tmp_path):
    def control_path(plan: Inventory) -> str:
        return effective(written(tmp_path, plan), "node1")["controlpath"]

    strict = control_path(LAB)
    assert control_path(LAB) == strict  # the same plan reuses its masters
    for lax in (
        plan_with(verify_host_key=False),
        plan_with(known_hosts="/elsewhere"),
        plan_with(key="/other/key"),
    ):
        assert control_path(lax) != strict


def test_an_external_jump_host_gets_the_same_hardening(tmp_path):
    plan = plan_with(jump="ops@bastion.example:2222")
    config = written(tmp_path, plan)
    assert effective(config, "node1")["proxyjump"] == "ops@bastion.example:2222"
    jump = effective(config, "bastion.example")
    assert (jump["batchmode"], jump["connecttimeout"]) == ("yes", "3")
    assert (jump["serveraliveinterval"], jump["serveralivecountmax"]) == ("2", "3")
    assert jump["stricthostkeychecking"] in ("true", "yes")
    known = jump["userknownhostsfile"].split()
    assert known[0] == "/var/lib/infergate-lab/ssh/known_hosts"
    assert known[1].endswith("/.ssh/known_hosts")  # where the user trusted it before
    assert jump["identityfile"] == "/var/lib/infergate-lab/ssh/id_ed25519"
    assert "controlpath" not in jump or jump["controlpath"] == "none"


def test_each_jump_on_the_way_adds_a_connect_timeout_to_the_local_deadline():
    sparks = parse_inventory(yaml.safe_load((INVENTORIES / "two-sparks-vllm.yaml").read_text()))
    assert [connections(n, sparks) for n in sparks.nodes] == [1, 2]
    external = plan_with(jump="ops@bastion.example")
    assert [connections(n, external) for n in external.nodes] == [2, 1]


def test_the_lock_and_deploy_down_connect_with_the_suites_trust_on_their_own(tmp_path):
    """The cluster lock and `deploy down` hold their own connection: the plan's ssh_config
    (accept-new against the plan's file, the hardening), never a master's socket."""
    plan = plan_with(verify_host_key=False, known_hosts=None)
    config = plan_ssh_config(plan, tmp_path / "lax.yaml")
    argv = ssh_command(config, plan.nodes[0], "flock ...")
    assert argv[-2:] == ["node1", "flock ..."]
    out = subprocess.run(["ssh", "-G", *argv[1:-1]], capture_output=True, text=True, check=True)
    opts = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert opts["stricthostkeychecking"] == "accept-new"
    assert opts["userknownhostsfile"] == str(plan_known_hosts(tmp_path / "lax.yaml"))
    assert (opts["batchmode"], opts["controlmaster"]) == ("yes", "false")
    assert "controlpath" not in opts  # ControlPath=none: ssh -G prints no socket at all
    assert ssh_command(config, dataclasses.replace(plan.nodes[0], ssh=dataclasses.replace(
        plan.nodes[0].ssh, connection="local")), "true") == ["sh", "-c", "true"]  # fmt: skip
