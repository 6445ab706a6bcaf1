"""`infergate plan from-ansible`: a plan skeleton from an Ansible inventory (selftest/data/ansible,
written for these tests in Ansible's documented formats) that loads once its TODOs are filled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.plan.ansible import TODO, plan_from_ansible
from infergate.plan.loader import load_plan
from infergate.plan.model import InventoryError

DATA = Path(__file__).resolve().parents[1] / "data" / "ansible"
YAML_INVENTORY = DATA / "sparks.yml"
INI_INVENTORY = DATA / "ini" / "sparks.ini"
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
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("inventory", "group"), [(YAML_INVENTORY, "sparks"), (INI_INVENTORY, "gpu")]
)
def test_skeleton_loads_once_its_todos_are_filled(
    inventory: Path, group: str, tmp_path: Path
) -> None:
    skeleton = plan_from_ansible(inventory, group)
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
    skeleton = written(tmp_path, "plan.yaml", plan_from_ansible(YAML_INVENTORY, "sparks"))
    with pytest.raises(InventoryError):
        load_plan(skeleton)


def test_without_a_group_every_host_is_a_node() -> None:
    plan = yaml.safe_load(plan_from_ansible(INI_INVENTORY))
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
    nodes = yaml.safe_load(plan_from_ansible(inventory))["nodes"]
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
    ],
)
def test_jump_host_from_ssh_common_args(common_args: str, jump: str | None, tmp_path: Path) -> None:
    inventory = written(
        tmp_path,
        "hosts.yml",
        yaml.safe_dump({"all": {"hosts": {"n1": {"ansible_ssh_common_args": common_args}}}}),
    )
    node = yaml.safe_load(plan_from_ansible(inventory))["nodes"][0]
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
