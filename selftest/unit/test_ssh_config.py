"""The ssh_config made from the inventory, read back by the real ssh client (`ssh -G`)."""

import dataclasses
import os
import pwd
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.plan.model import Inventory, InventoryError, parse_inventory
from infergate.remote.ssh import connections
from infergate.remote.ssh_config import (
    MASTER_IDLE_S,
    SshConfigError,
    SshSetupError,
    plan_known_hosts,
    plan_ssh_config,
    ssh_command,
    ssh_config,
)

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
MASTERS = Path("/tmp/ig-unit")  # short: a socket path holds 107 bytes (ssh -G makes none)


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
    config.write_text(ssh_config(inv, MASTERS))
    opts = effective(config, "node2")
    assert opts["hostname"] == "10.251.0.12"
    assert opts["user"] == "root"
    assert opts["stricthostkeychecking"] in ("true", "yes")
    assert opts["userknownhostsfile"] == "/var/lib/infergate-lab/ssh/known_hosts"
    assert opts["identityfile"] == "/var/lib/infergate-lab/ssh/id_ed25519"
    assert opts["batchmode"] == "yes"
    assert opts["connecttimeout"] == "3"
    assert opts["controlpath"].startswith(str(MASTERS))


def test_sparks_config_jumps_through_spark1(tmp_path):
    inv = parse_inventory(yaml.safe_load((INVENTORIES / "two-sparks-vllm.yaml").read_text()))
    config = tmp_path / "ssh_config"
    config.write_text(ssh_config(inv, MASTERS))
    assert effective(config, "spark2")["proxyjump"] == "spark1"
    assert effective(config, "spark2")["user"] == "aurora"
    assert "proxyjump" not in effective(config, "spark1")


LAB = parse_inventory(yaml.safe_load((INVENTORIES / "lab.yaml").read_text()))


def plan_with(**ssh: object) -> Inventory:
    """The lab plan with node1's ssh settings replaced (past the plan's own validation: these
    are the values it must refuse, and the ssh_config must refuse them again)."""
    node = dataclasses.replace(LAB.nodes[0], ssh=dataclasses.replace(LAB.nodes[0].ssh, **ssh))
    return dataclasses.replace(LAB, nodes=(node, LAB.nodes[1]))


def written(tmp_path: Path, plan: Inventory, **kw: Any) -> Path:
    config = tmp_path / "ssh_config"
    config.write_text(ssh_config(plan, MASTERS, **kw))
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
        ssh_config(plan_with(**{field: value}), MASTERS)


def test_a_node_name_that_is_a_host_pattern_is_refused(tmp_path):
    plan = dataclasses.replace(LAB, nodes=(dataclasses.replace(LAB.nodes[0], name="node*"),))
    with pytest.raises(SshConfigError, match=r"^nodes\[0\]\.name = 'node\*'"):
        ssh_config(plan, MASTERS)


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
    config = plan_ssh_config(plan, tmp_path / "lax.yaml", None)
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


def reading(address: str | None = None, **ssh: object) -> Inventory:
    """The lab plan with node1 at ADDRESS with its ssh settings SSH."""
    first = dataclasses.replace(LAB.nodes[0], address=address or LAB.nodes[0].address)
    first = dataclasses.replace(first, ssh=dataclasses.replace(first.ssh, **ssh))
    return dataclasses.replace(LAB, nodes=(first, LAB.nodes[1]))


def users(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_users_config_is_included_after_match_all_so_it_applies_to_every_host(tmp_path):
    user = users(tmp_path / "config", "Host *\n  CertificateFile /k/cert\n")
    text = ssh_config(LAB, MASTERS, user=user)
    assert text.endswith(f'\n\nMatch final\nMatch all\n  Include "{user}"\n')
    assert text.rindex("\nHost ") < text.index("Match all")  # not inside the last Host block
    for node in ("node1", "node2"):
        assert effective(written(tmp_path, LAB, user=user), node)["certificatefile"] == "/k/cert"


@pytest.mark.parametrize("value", [None, "none", "", False])
def test_ssh_config_none_false_or_empty_turns_the_operators_config_off(tmp_path, value):
    data = yaml.safe_load((INVENTORIES / "lab.yaml").read_text())
    assert parse_inventory(data).nodes[0].ssh.config is True  # the default
    for node in data["nodes"]:
        node["ssh"]["config"] = value
    plan = parse_inventory(data)
    assert plan.nodes[0].ssh.config is False
    assert "Include" not in ssh_config(plan, MASTERS, user=users(tmp_path / "config", ""))


def test_a_plan_that_names_a_file_is_refused_naming_the_operators_option():
    data = yaml.safe_load((INVENTORIES / "lab.yaml").read_text())
    data["nodes"][1]["ssh"]["config"] = "~/.ssh/config"
    with pytest.raises(InventoryError) as refused:
        parse_inventory(data)
    assert refused.value.path == "nodes[1].ssh.config"
    assert "--ssh-user-config or $INFERGATE_SSH_CONFIG" in refused.value.message


def test_a_percent_in_the_users_config_path_is_literal(tmp_path):
    user = users(tmp_path / "100%d" / "config", "Host node2\n  CertificateFile /c\n")
    assert effective(written(tmp_path, LAB, user=user), "node2")["certificatefile"] == "/c"


def test_every_node_turns_the_operators_config_off_or_none_does():
    data = yaml.safe_load((INVENTORIES / "lab.yaml").read_text())
    data["nodes"][1]["ssh"]["config"] = False
    with pytest.raises(InventoryError, match="one ssh_config serves every host") as refused:
        parse_inventory(data)
    assert refused.value.path == "nodes[1].ssh.config"


SPARK = """\
Host spark-a
  HostName 10.251.0.11
  IdentityFile /k/spark
Host 10.251.0.*
  CertificateFile /k/lab-cert
"""


def test_an_address_that_is_an_alias_of_the_users_config_reaches_its_hostname(tmp_path):
    user = users(tmp_path / "config", SPARK)
    config = written(tmp_path, reading("spark-a", key=None), user=user)
    alias = effective(config, "spark-a")  # the user's own `ssh spark-a`, through our file
    assert (alias["hostname"], alias["identityfile"]) == ("10.251.0.11", "/k/spark")
    node1 = effective(config, "node1")
    assert node1["hostname"] == "10.251.0.11"  # asked of `ssh -G` when the config is written
    assert node1["certificatefile"] == "/k/lab-cert"  # a block for the address applies
    # ssh matches Host against node1 and then 10.251.0.11, never the alias between them
    assert "/k/spark" not in written(tmp_path, reading()).read_text()


def test_plan_check_writes_the_config_without_asking_ssh(tmp_path):
    user = users(tmp_path / "config", SPARK)
    text = ssh_config(reading("spark-a", key=None), MASTERS, user=user, resolve=False)
    assert '  HostName "spark-a"' in text  # not resolved: ssh read none of the user's file


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
  ControlPersist yes
  BatchMode no
  IdentitiesOnly no
  IdentityFile /k/theirs
  ProxyCommand nc %h %p
  ProxyJump theirs
  PermitLocalCommand yes
  LocalCommand touch /tmp/x
  KnownHostsCommand /bin/echo %H
  ForwardAgent yes
  ForwardX11 yes
  UpdateHostKeys yes
""",
    )
    plan = plan_with(jump="ops@bastion.example:2222")
    config = written(tmp_path, plan, user=user)
    opts = effective(config, "node2")
    assert (opts["user"], opts["port"], opts["batchmode"]) == ("root", "22", "yes")
    assert opts["stricthostkeychecking"] in ("true", "yes")
    assert opts["userknownhostsfile"] == "/var/lib/infergate-lab/ssh/known_hosts"
    assert opts["controlpath"].startswith(str(MASTERS))
    assert opts["controlpersist"] == "60"  # a master that is never told to exit still ends
    assert opts["identitiesonly"] == "yes"
    keys = [value for name, value in options(config, "node2") if name == "identityfile"]
    assert keys == ["/var/lib/infergate-lab/ssh/id_ed25519", "/k/theirs"]  # the plan's first
    for host in ("node2", "node1", "bastion.example"):  # a node, one with a jump, the jump
        opts = effective(config, host)
        pinned = ("permitlocalcommand", "forwardagent", "forwardx11", "updatehostkeys")
        assert [opts[name] for name in pinned] == ["no", "no", "no", "false"], host
        assert "knownhostscommand" not in opts, host
        assert "proxycommand" not in opts, host  # ProxyCommand none
        assert opts.get("proxyjump") == ("ops@bastion.example:2222" if host == "node1" else None)


def test_every_block_names_its_known_hosts_file(tmp_path):
    plan = plan_with(known_hosts=None, jump="bastion.example")
    home = pwd.getpwuid(os.getuid()).pw_dir  # ssh's own ~
    for host in ("node1", "bastion.example"):
        known = effective(written(tmp_path, plan), host)["userknownhostsfile"]
        assert known == f"{home}/.ssh/known_hosts", host


def test_a_host_key_alias_of_the_users_is_refused_naming_the_node(tmp_path):
    user = users(tmp_path / "config", "Host 10.251.0.12\n  HostKeyAlias trusted-host\n")
    with pytest.raises(SshSetupError, match=r"^node2 \(10\.251\.0\.12\): .* HostKeyAlias trusted"):
        ssh_config(LAB, MASTERS, user=user)


def test_every_master_ends_on_its_own_and_its_path_says_how_long_it_lives(tmp_path):
    def control(persist_s: int) -> tuple[str, str]:
        opts = effective(written(tmp_path, LAB, persist_s=persist_s), "node1")
        return opts["controlpersist"], opts["controlpath"]

    assert control(0)[0] == str(MASTER_IDLE_S)  # ended by the run, and on its own if not
    assert control(300)[0] == "300"
    assert len({control(0)[1], control(300)[1], control(600)[1]}) == 3


def test_a_socket_path_too_long_for_sun_path_is_a_setup_error_naming_it(tmp_path):
    long = Path("/tmp") / ("d" * 50)
    with pytest.raises(SshSetupError) as refused:
        ssh_config(LAB, long)
    assert str(refused.value).startswith(f"{long}/%C-")
    assert "over the 90 a unix socket path leaves ssh" in str(refused.value)
    assert "fix: set TMPDIR to a shorter folder" in str(refused.value)
