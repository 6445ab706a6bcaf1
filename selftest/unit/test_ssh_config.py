"""The ssh_config made from the inventory, read back by the real ssh client (`ssh -G`)."""

import dataclasses
import subprocess
from pathlib import Path

import pytest
import yaml

from infergate.plan.model import Inventory, parse_inventory
from infergate.remote.ssh import connections
from infergate.remote.ssh_config import (
    SshConfigError,
    plan_known_hosts,
    plan_ssh_config,
    ssh_command,
    ssh_config,
)

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """A home without an ssh_config: the plans' default `~/.ssh/config` is not the selftest
    runner's own."""
    monkeypatch.setenv("HOME", str(tmp_path))


def options(config: Path, host: str) -> list[tuple[str, str]]:
    """What ssh itself would use for `host`: `ssh -G` prints its resolved options."""
    out = subprocess.run(
        ["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, check=True
    ).stdout
    return [(k, v) for k, _, v in (line.partition(" ") for line in out.splitlines()) if v]


def effective(config: Path, host: str) -> dict[str, str]:
    """`options` by name (of a list, such as identityfile, the last)."""
    return dict(options(config, host))


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
    assert ssh_command(
        config,
        dataclasses.replace(
            plan.nodes[0], ssh=dataclasses.replace(plan.nodes[0].ssh, connection="local")
        ),
        "true",
    ) == ["sh", "-c", "true"]


def reading(user: Path | str | None, address: str | None = None, **ssh: object) -> Inventory:
    """The lab plan with every node reading the user's ssh_config USER, and node1 at
    ADDRESS with its ssh settings SSH."""
    nodes = [
        dataclasses.replace(n, ssh=dataclasses.replace(n.ssh, config=user and str(user)))
        for n in LAB.nodes
    ]
    first = dataclasses.replace(nodes[0], address=address or nodes[0].address)
    nodes[0] = dataclasses.replace(first, ssh=dataclasses.replace(first.ssh, **ssh))
    return dataclasses.replace(LAB, nodes=tuple(nodes))


def users(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_users_config_is_included_after_match_all_so_it_applies_to_every_host(tmp_path):
    user = users(tmp_path / "config", "Host *\n  CertificateFile /k/cert\n")
    text = ssh_config(reading(user), tmp_path)
    assert text.endswith(f'\n\nMatch final\nMatch all\n  Include "{user}"\n')
    assert text.rindex("\nHost ") < text.index("Match all")  # not inside the last Host block
    for node in ("node1", "node2"):
        assert effective(written(tmp_path, reading(user)), node)["certificatefile"] == "/k/cert"


@pytest.mark.parametrize("value", [None, "none", "", False])
def test_ssh_config_none_false_or_empty_reads_no_user_config(value):
    data = yaml.safe_load((INVENTORIES / "lab.yaml").read_text())
    assert parse_inventory(data).nodes[0].ssh.config == "~/.ssh/config"  # the default
    data["nodes"][0]["ssh"]["config"] = value
    assert parse_inventory(data).nodes[0].ssh.config is None


def test_a_disabled_or_missing_user_config_is_not_included(tmp_path):
    assert "Include" not in ssh_config(reading(None), tmp_path)
    assert "Include" not in ssh_config(reading(tmp_path / "absent"), tmp_path)


def test_the_users_config_path_is_absolute_and_quoted_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "my home"))  # ssh would read ~ from passwd
    user = users(tmp_path / "my home" / ".ssh" / "config", "Host node2\n  CertificateFile /c\n")
    plan = reading("~/.ssh/config")
    assert f'  Include "{user}"\n' in ssh_config(plan, tmp_path)
    assert effective(written(tmp_path, plan), "node2")["certificatefile"] == "/c"


def test_a_percent_in_the_users_config_path_is_literal_and_a_pattern_is_refused(tmp_path):
    user = users(tmp_path / "100%d" / "config", "Host node2\n  CertificateFile /c\n")
    assert effective(written(tmp_path, reading(user)), "node2")["certificatefile"] == "/c"
    with pytest.raises(SshConfigError, match=r"^ssh\.config = .*Include would read \*"):
        ssh_config(reading(users(tmp_path / "[ssh]" / "config", "")), tmp_path)


def test_every_node_reads_the_same_user_config(tmp_path):
    plan = reading(users(tmp_path / "a", ""), config=str(users(tmp_path / "b", "")))
    with pytest.raises(SshConfigError, match=r"^nodes\[\*\]\.ssh\.config = "):
        ssh_config(plan, tmp_path)


SPARK = """\
Host spark-a
  HostName 10.251.0.11
  IdentityFile /k/spark
Host 10.251.0.*
  CertificateFile /k/lab-cert
"""


def test_an_address_that_is_an_alias_of_the_users_config_reaches_its_hostname(tmp_path):
    config = written(tmp_path, reading(users(tmp_path / "config", SPARK), "spark-a", key=None))
    alias = effective(config, "spark-a")  # the user's own `ssh spark-a`, through our file
    assert (alias["hostname"], alias["identityfile"]) == ("10.251.0.11", "/k/spark")
    node1 = effective(config, "node1")
    assert node1["hostname"] == "10.251.0.11"  # asked of `ssh -G` when the config is written
    assert node1["certificatefile"] == "/k/lab-cert"  # a block for the address applies
    # ssh matches Host against node1 and then 10.251.0.11, never the alias between them
    assert "/k/spark" not in written(tmp_path, reading(None)).read_text()


def test_the_plans_values_win_over_the_users_for_the_same_option(tmp_path):
    user = users(
        tmp_path / "config",
        """\
Host *
  User alice
  Port 2222
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  ControlPath /tmp/theirs-%C
  BatchMode no
  IdentitiesOnly no
  IdentityFile /k/theirs
""",
    )
    config = written(tmp_path, reading(user))
    opts = effective(config, "node1")
    assert (opts["user"], opts["port"], opts["batchmode"]) == ("root", "22", "yes")
    assert opts["stricthostkeychecking"] in ("true", "yes")
    assert opts["userknownhostsfile"] == "/var/lib/infergate-lab/ssh/known_hosts"
    assert opts["controlpath"].startswith(str(tmp_path))
    assert opts["identitiesonly"] == "yes"
    keys = [value for name, value in options(config, "node1") if name == "identityfile"]
    assert keys == ["/var/lib/infergate-lab/ssh/id_ed25519", "/k/theirs"]  # the plan's first
