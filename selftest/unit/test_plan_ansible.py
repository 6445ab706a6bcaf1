"""`infergate plan from-ansible`: a plan skeleton from an Ansible inventory (selftest/data/ansible,
written for these tests in Ansible's documented formats) that loads once its TODOs are filled,
read by infergate's file reader and by the real ansible-inventory alike."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.cli import ansible_inventory_program, main
from infergate.plan.ansible import TODO, AnsibleError, plan_from_ansible
from infergate.plan.ansible_ssh import ssh_args
from infergate.plan.loader import load_plan
from infergate.plan.model import InventoryError

DATA = Path(__file__).resolve().parents[1] / "data" / "ansible"
YAML_INVENTORY = DATA / "sparks.yml"
INI_INVENTORY = DATA / "ini" / "sparks.ini"
DEEPOPS = DATA / "deepops" / "inventory"
BASTION = "ubuntu@10.0.0.1"
VAULT = "!vault |\n    $ANSIBLE_VAULT;1.1;AES256\n    6162636465666768\n"
# what an operator writes over each TODO of the two Sparks' skeleton
FILLED: dict[str, object] = {
    "fabric.interface": "enp1s0f1np1",
    "fabric.subnet": "192.168.200.0/24",
    "image.ref": "nvcr.io/nvidia/vllm:26.05-py3",
    "model.path": "/models/qwen",
    "model.served_name": "qwen",
    "engine.kind": "vllm",
    "engine.tensor_parallel": 2,
    "engine.dist_init_addr": "192.168.200.12",
    "engine.dist_init_port": 29501,
    "engine.api_port": 8000,
    "nodes[0].fabric.address": "192.168.200.12/24",
    "nodes[1].fabric.address": "192.168.200.13/24",
    "nodes[0].gpus": 1,
    "nodes[1].gpus": 1,
}


def filled(skeleton: str) -> tuple[dict[str, Any], list[str]]:
    """The skeleton with every TODO replaced from FILLED, and the TODO paths FILLED lacks."""
    plan = yaml.safe_load(skeleton)
    missing: list[str] = []

    def fill(node: Any, path: str) -> Any:
        if isinstance(node, dict):
            return {k: fill(item, f"{path}.{k}" if path else k) for k, item in node.items()}
        if isinstance(node, list):
            return [fill(item, f"{path}[{i}]") for i, item in enumerate(node)]
        if node == TODO:
            missing.extend([] if path in FILLED else [path])
            return FILLED.get(path)
        return node

    return fill(plan, ""), missing


def written(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def ansible_inventory() -> str:
    """The real ansible-inventory that the dev extra's ansible-core installs, found as the
    command finds it (on PATH, else beside this Python); CI never skips it."""
    found = ansible_inventory_program()
    if found is None and os.environ.get("CI") == "true":
        pytest.fail("ansible-inventory is missing: the dev extra installs ansible-core")
    if found is None:
        pytest.skip("ansible-inventory is not installed: pip install ansible-core")
    return found


@pytest.fixture(params=[None, "ansible_inventory"], ids=["files", "ansible-inventory"])
def program(request: pytest.FixtureRequest) -> str | None:
    """How from-ansible reads: its file reader (None), or the real ansible-inventory."""
    return None if request.param is None else str(request.getfixturevalue(request.param))


@pytest.mark.parametrize(
    ("inventory", "group"), [(YAML_INVENTORY, "sparks"), (INI_INVENTORY, "gpu")]
)
def test_skeleton_loads_once_its_todos_are_filled(
    inventory: Path, group: str, program: str | None, tmp_path: Path
) -> None:
    skeleton = plan_from_ansible(inventory, group, program).text
    assert skeleton.count("# TODO: fill") == len(FILLED)
    plan, missing = filled(skeleton)
    assert missing == []
    loaded = load_plan(written(tmp_path, "plan.yaml", yaml.safe_dump(plan)))
    assert [(n.name, n.address, n.ssh.user, n.ssh.key) for n in loaded.nodes] == [
        ("spark-01", "192.168.100.11", "nvidia", "~/.ssh/id_ed25519"),
        ("spark-02", "192.168.100.12", "nvidia", "~/.ssh/id_ed25519"),
    ]
    assert (loaded.nodes[1].ssh.port, loaded.nodes[1].ssh.jump) == (2222, "spark-01")


def test_skeleton_todos_are_left_as_todo_until_filled(tmp_path: Path) -> None:
    skeleton = written(tmp_path, "plan.yaml", plan_from_ansible(YAML_INVENTORY, "sparks").text)
    with pytest.raises(InventoryError):
        load_plan(skeleton)


def test_without_a_group_every_host_is_a_node() -> None:
    plan = yaml.safe_load(plan_from_ansible(INI_INVENTORY).text)
    assert [n["name"] for n in plan["nodes"]] == ["spark-01", "spark-02", "grafana"]
    assert plan["nodes"][2]["ssh"] == {"user": "admin"}


def test_ini_ranges_groups_and_precedence(tmp_path: Path) -> None:
    inventory = written(
        tmp_path,
        "hosts",
        "[gpu]\nnode[08:10] ansible_user=ops\n\n[gpu:vars]\nansible_user = everyone\n"
        "ansible_port=2200\n\n[all:vars]\nansible_port=22\n",
    )
    (tmp_path / "host_vars").mkdir()
    written(tmp_path / "host_vars", "node09.yml", "ansible_user: root\n")
    nodes = yaml.safe_load(plan_from_ansible(inventory).text)["nodes"]
    assert [(n["name"], n["ssh"]["user"], n["ssh"]["port"]) for n in nodes] == [
        ("node08", "ops", 2200),
        ("node09", "root", 2200),
        ("node10", "ops", 2200),
    ]


@pytest.mark.parametrize(
    ("common_args", "jump"),
    [
        ("-o ProxyJump=bastion", "bastion"),
        ("-o 'ProxyJump ops@bastion:2222'", "ops@bastion:2222"),
        ("-J bastion -o StrictHostKeyChecking=no", "bastion"),
        ("-o ProxyJump=a,b", TODO),
        ("-o StrictHostKeyChecking=no", None),
        ('-o ProxyCommand="ssh -W %h:%p -q ops@bastion"', "ops@bastion"),
        ("-o 'ProxyCommand ssh -q -W %h:%p -p 2222 -l ops bastion'", "ops@bastion:2222"),
        ('-oProxyCommand="/usr/bin/ssh bastion -W %h:%p" -J other', "bastion"),
        ('-o ProxyCommand="nc -X connect -x proxy:3128 %h %p"', TODO),
        ("-o ProxyCommand=none -o ProxyJump=none", None),
    ],
)
def test_jump_host_from_ssh_common_args(common_args: str, jump: str | None, tmp_path: Path) -> None:
    inventory = written(
        tmp_path,
        "hosts.yml",
        yaml.safe_dump({"all": {"hosts": {"n1": {"ansible_ssh_common_args": common_args}}}}),
    )
    node = yaml.safe_load(plan_from_ansible(inventory).text)["nodes"][0]
    assert node.get("ssh", {}).get("jump") == jump


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("hosts.yml", "- just\n- a list\n", "not an Ansible inventory"),
        ("hosts.yml", "all:\n  children:\n    empty: {}\n", "no hosts"),
        ("hosts.yml", "all:\n  hostz: {}\n", "not an Ansible group"),
        ("hosts.ini", "[gpu\nnode1\n", "not an INI section"),
        ("hosts.ini", "[gpu:vars]\nno_equals\n", "not key=value"),
        ("hosts.ini", "# nothing here\n", "no hosts"),
        ("hosts.ini", "[a:children]\nb\n[b:children]\na\n[b]\nn1\n", "children of each other"),
    ],
)
def test_not_an_inventory_is_a_clear_error(name: str, text: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match=says):
        plan_from_ansible(written(tmp_path, name, text))


def test_an_unknown_group_names_the_groups() -> None:
    with pytest.raises(InventoryError, match=r"groups: all, gpu, monitoring, sparks$"):
        plan_from_ansible(INI_INVENTORY, "gpus")


def test_an_ansible_inventory_given_as_the_plan_says_how_to_convert_it() -> None:
    with pytest.raises(InventoryError) as e:
        load_plan(YAML_INVENTORY)
    assert e.value.in_file(YAML_INVENTORY).endswith(
        "all: this is an Ansible inventory, not a plan: `infergate plan from-ansible PATH` "
        "writes a plan from it"
    )


def test_deepops_inventory_reaches_every_node_through_its_bastion(program: str | None) -> None:
    """DeepOps sets its bastion as a ProxyCommand in [all:vars]: every node's jump host."""
    skeleton = plan_from_ansible(DEEPOPS, None, program)
    nodes = {n["name"]: (n["address"], n["ssh"]) for n in yaml.safe_load(skeleton.text)["nodes"]}
    ssh = {"user": "ubuntu", "jump": BASTION}
    assert nodes == {
        "ctl01": ("10.0.0.1", ssh),
        "ctl02": ("10.0.0.2", ssh),
        "ctl03": ("10.0.0.3", ssh),
        "login01": ("10.0.1.1", ssh),
        "dgx01": ("10.0.2.1", ssh),
        "dgx02": ("10.0.2.2", ssh),
    }


def test_hosts_outside_the_group_are_named_on_stderr(
    program: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command says which hosts it left out, and that one is the nodes' bastion."""
    reader = "files" if program is None else "ansible-inventory"
    argv = ["plan", "from-ansible", str(DEEPOPS), "--group", "kube-node", "--reader", reader]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert [n["name"] for n in yaml.safe_load(printed.out)["nodes"]] == ["dgx01", "dgx02"]
    assert printed.err.splitlines() == [
        f"{DEEPOPS}: left out, not in the group kube-node: ctl01 (the jump host of dgx01, "
        "dgx02), ctl02, ctl03, login01"
    ]


def test_vault_values_are_skipped_with_a_note_and_their_hosts_kept(
    program: str | None, tmp_path: Path
) -> None:
    inventory = written(
        tmp_path,
        "hosts.yml",
        "all:\n  hosts:\n    n1:\n      ansible_host: 10.0.0.5\n"
        f"      ansible_become_password: {VAULT.replace(chr(10), chr(10) + '    ')}"
        "\n    n2:\n      ansible_host: 10.0.0.6\n",
    )
    vaulted = f"ansible_user: ops\nansible_password: {VAULT}ansible_port: {VAULT}"
    written(tmp_path, "group_vars/all.yml", vaulted)
    skeleton = plan_from_ansible(inventory, None, program)
    nodes = yaml.safe_load(skeleton.text)["nodes"]
    assert [(n["name"], n["address"], n["ssh"]) for n in nodes] == [
        ("n1", "10.0.0.5", {"user": "ops"}),
        ("n2", "10.0.0.6", {"user": "ops"}),
    ]
    assert set(skeleton.notes) == {
        "n1, n2: ansible_password: vault-encrypted, skipped",
        "n1, n2: ansible_port: vault-encrypted, so not carried over: write it in",
        "n1: ansible_become_password: vault-encrypted, skipped",
    }


SECRET = "s3cr3t-SSH-PASS-77a1"
SETTINGS = f"""[gpu]
n1 ansible_connection=docker
n2 ansible_ssh_extra_args='-o StrictHostKeyChecking=no -C -J ops@bastion:2200'
n3 ansible_ssh_common_args='-o ProxyCommand="nc -X connect -x proxy:3128 %h %p"'
n4 ansible_connection=local ansible_ssh_executable=/opt/ssh

[gpu:vars]
ansible_become=true
ansible_ssh_pass={SECRET}
ansible_python_interpreter=/usr/bin/python3
"""


def test_each_connection_setting_not_carried_over_is_a_note(
    program: str | None, tmp_path: Path
) -> None:
    """What the plan can say is carried over; the rest is named, host and var, never its
    value; ansible_python_interpreter is no connection setting, so no note."""
    skeleton = plan_from_ansible(written(tmp_path, "hosts", SETTINGS), None, program)
    nodes = yaml.safe_load(skeleton.text)["nodes"]
    assert [n.get("ssh") for n in nodes] == [
        None,
        {"jump": "ops@bastion:2200"},
        {"jump": TODO},
        {"connection": "local"},
    ]
    assert set(skeleton.notes) == {
        "n1: ansible_connection: 'docker' is not carried over: the plan reaches a node by ssh "
        "(or local, for this controller)",
        "n2: ansible_ssh_extra_args: -o StrictHostKeyChecking is not carried over",
        "n3: ansible_ssh_common_args: a ProxyCommand not of the form `ssh -W %h:%p [-p PORT] "
        "[user@]host` is not guessed: the jump is left TODO",
        "n4: ansible_ssh_executable: not carried over: infergate runs the ssh on its PATH",
        "n1, n2, n3, n4: ansible_become: not carried over: infergate runs every command as the "
        "SSH user, never with become",
        "n1, n2, n3, n4: ansible_ssh_pass: a password is not carried over: the plan logs in "
        "with a key or the SSH agent",
    }
    assert len(skeleton.notes) == 6


@pytest.mark.parametrize(
    ("args", "jump", "notes"),
    [
        ('-o ProxyCommand="ssh -W %h:%p -q ubuntu@10.0.0.1"', BASTION, []),
        ('-o ProxyCommand="ssh -W [%h]:%p -p 2200 ubuntu@10.0.0.1"', f"{BASTION}:2200", []),
        ('-o ProxyCommand="ssh -W %h:%p -i ~/.ssh/jump bastion"', TODO, ["ProxyCommand"]),
        ('-o ProxyCommand="ssh -W %h:%p -o User=x bastion"', TODO, ["ProxyCommand"]),
        ('-o ProxyCommand="ssh -W %h:%p a b"', TODO, ["ProxyCommand"]),
        ('-o ProxyCommand="ssh -q bastion"', TODO, ["ProxyCommand"]),
        ('-o ProxyCommand="ssh -W %h:%p {{ bastion }}"', TODO, ["templated"]),
        ("-o ControlPath={{ path }}", None, ["templated"]),
        ("-o ProxyJump=a,b", TODO, ["a chain of jump hosts"]),
        ("-J bastion -o ProxyJump=other -q -o ControlMaster=auto", "bastion", ["ControlMaster"]),
        ("-o 'unclosed", None, ["cannot be split into words"]),
        ("-i ~/.ssh/other stray", None, ["-i is not", "an argument that is no ssh option"]),
    ],
)
def test_ssh_args_give_the_jump_and_what_is_not_carried(
    args: str, jump: str | None, notes: list[str]
) -> None:
    found, said = ssh_args(args)
    assert found == jump
    assert len(said) == len(notes)
    assert all(note in why for note, why in zip(notes, said, strict=True)), said


def test_where_ansible_inventory_is_installed_the_command_reads_through_it(
    ansible_inventory: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An inventory script, which only Ansible can run, gives the plan its nodes."""
    listed = {"gpu": {"hosts": ["n1"]}, "_meta": {"hostvars": {"n1": {"ansible_host": "10.0.0.9"}}}}
    script = written(tmp_path, "inventory.sh", f"#!/bin/sh\necho '{json.dumps(listed)}'\n")
    script.chmod(0o755)
    assert main(["plan", "from-ansible", str(script)]) == 0
    nodes = yaml.safe_load(capsys.readouterr().out)["nodes"]
    assert [(n["name"], n["address"]) for n in nodes] == [("n1", "10.0.0.9")]


def test_ansible_inventory_output_meets_the_file_readers_guards(
    ansible_inventory: str, tmp_path: Path
) -> None:
    """What Ansible lists is read by the plan's readers too: an option as a user is refused."""
    inventory = written(tmp_path, "hosts", "[gpu]\nnode1 ansible_user=-oProxyCommand=id\n")
    with pytest.raises(AnsibleError) as refused:
        plan_from_ansible(inventory, None, ansible_inventory)
    assert (refused.value.file, refused.value.path) == (inventory, "node1.ansible_user")
    assert "is not a user name" in refused.value.message


def test_an_inventory_ansible_cannot_parse_is_its_error_in_one_line(
    ansible_inventory: str, tmp_path: Path
) -> None:
    inventory = written(tmp_path, "hosts", "[gpu\nnode1\n")
    with pytest.raises(AnsibleError) as refused:
        plan_from_ansible(inventory, None, ansible_inventory)
    assert refused.value.message.startswith(f"{ansible_inventory} cannot list it (exit ")
    assert "Failed to parse" in refused.value.message
    assert "\n" not in refused.value.in_file(inventory)


def test_without_ansible_inventory_the_files_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where no ansible-inventory is installed (none on PATH, none beside this Python), the
    command reads the files; asked for ansible-inventory, it says how to install it."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    assert main(["plan", "from-ansible", str(DEEPOPS)]) == 0
    assert len(yaml.safe_load(capsys.readouterr().out)["nodes"]) == 6
    assert main(["plan", "from-ansible", str(DEEPOPS), "--reader", "ansible-inventory"]) == 4
    assert "ansible-inventory is not installed, " in capsys.readouterr().err
