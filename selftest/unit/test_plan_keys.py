"""Plan keys come from the plan's model: the parser reads exactly the model's fields, every
key a message names is one the model has, and a value a node sets itself is named by the
node's own key (`nodes[1].fabric.interface`), not by the plan-wide key it stands in for."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import pytest

from infergate.checks.network import check_fabric_interface
from infergate.checks.pinning import check_pinning
from infergate.plan.model import SET_BY_PARSER, Inventory, is_plan_key, parse_inventory, plan_key
from infergate.plan.schema import plan_schema
from selftest.unit.test_checks_network import interfaces
from selftest.unit.test_inventory import lab_with

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("infergate", "fixtures", "tests_preflight", "tests_deploy", "tests_inference")
SECTIONS = "|".join(f.name for f in fields(Inventory))
# A key as messages write one: a section of the plan, then dotted fields, lists by [i], [] or [*]
KEY = re.compile(
    rf"(?<![\w./\[-])(?:{SECTIONS})(?:\[[^\]\s]*\])?(?:\.[A-Za-z_]\w*(?:\[[^\]\s]*\])?)+"
)
# Words that read like keys but name something else
NOT_KEYS = {
    "model.safetensors.index.json",  # the weights' index file, as Hugging Face names it
    "engine.sock",  # the file of a node's Docker socket, forwarded to this controller
}


def schema_keys(schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Every key of the plan's JSON Schema: what the parser reads (plan_schema traces it)."""
    if schema.get("type") == "array" and "properties" in schema["items"]:
        schema = schema["items"]
        path += "[]"
    for key, below in schema.get("properties", {}).items():
        yield f"{path}.{key}" if path else key
        yield from schema_keys(below, f"{path}.{key}" if path else key)


def model_keys(model: type, path: str = "") -> Iterator[str]:
    """Every field of the model, but those the parser works out rather than reads."""
    hints = get_type_hints(model)
    for f in fields(model):
        if f.metadata == SET_BY_PARSER:
            continue
        key, kind = f"{path}.{f.name}" if path else f.name, hints[f.name]
        yield key
        if get_origin(kind) is tuple and is_dataclass(get_args(kind)[0]):
            yield from model_keys(get_args(kind)[0], f"{key}[]")
        elif isinstance(kind, type) and is_dataclass(kind):
            yield from model_keys(kind, key)


def test_the_parser_reads_exactly_the_models_fields():
    assert sorted(schema_keys(plan_schema())) == sorted(model_keys(Inventory))


def strings_of(path: Path) -> Iterator[tuple[int, str]]:
    """Each string literal of a module, f-strings' text included, with its line."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def named_keys() -> Iterator[tuple[str, str]]:
    """(file:line, key) for each key named in a string. A string that is a key and nothing
    else may be a node's key below the node (`fabric.address`), as Node.key_of takes one."""
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, text in strings_of(path):
                for key in set(KEY.findall(text)) - NOT_KEYS:
                    below = key == text and not is_plan_key(key)
                    yield f"{path.relative_to(ROOT)}:{line}", f"nodes[].{key}" if below else key


def test_messages_name_only_keys_the_plan_has():
    """A remedy that says `raise thresholds.ready_s` (there is no such key) sends the operator
    hunting; every key-shaped word in the library, the fixtures and the tests must be one the
    model holds."""
    found = list(named_keys())
    assert len(found) > 50  # the pattern still finds the keys messages name
    unknown = [f"{where}: {key}" for where, key in found if not is_plan_key(key)]
    assert unknown == []


@pytest.mark.parametrize(
    "key", ["fabric.address", "nodes[0].ssh.hops", "nodes.name", "engine.env.X.Y", "gpus"]
)
def test_a_key_the_model_lacks_is_refused(key):
    with pytest.raises(KeyError, match="no key of the plan"):
        plan_key(key)


def test_a_node_that_sets_its_own_interface_is_named_by_its_own_key():
    inv = parse_inventory(lab_with(("nodes[1].fabric.interface", "fab9")))
    first, second = inv.nodes
    assert first.key_of("fabric.interface") == "fabric.interface"
    assert second.key_of("fabric.interface") == "nodes[1].fabric.interface"
    assert second.key_of("fabric.address") == "nodes[1].fabric.address"


def test_a_node_env_variable_is_named_where_it_is_set():
    inv = parse_inventory(lab_with(("nodes[1].env", {"NCCL_DEBUG": "INFO"})))
    first, second = inv.nodes
    assert second.key_of("env.NCCL_DEBUG") == "nodes[1].env.NCCL_DEBUG"
    assert first.key_of("env.NCCL_DEBUG") == "engine.env.NCCL_DEBUG"


def test_a_missing_interface_is_fixed_at_the_nodes_own_key():
    """The node's own fabric.interface is wrong: the remedy names nodes[1].fabric.interface,
    the line to edit, not fabric.interface, which this node does not read."""
    inv = parse_inventory(lab_with(("nodes[1].fabric.interface", "fab9")))
    node = inv.nodes[1]
    key = node.key_of("fabric.interface")
    seen = interfaces("healthy", node.name)
    (problem,) = check_fabric_interface(seen, node.fabric.interface, node.fabric.address, key)
    assert "fix nodes[1].fabric.interface in the plan" in problem.remedy


def test_a_variable_is_fixed_where_it_is_set_for_the_node():
    """GLOO_SOCKET_IFNAME from engine.env is fixed there; a node's own, in its env."""
    plan = lab_with(
        ("engine.env.GLOO_SOCKET_IFNAME", "eth9"), ("nodes[1].env", {"GLOO_SOCKET_IFNAME": "eth8"})
    )
    inv = parse_inventory(plan)
    for node, key in zip(inv.nodes, ["engine.env", "nodes[1].env"], strict=True):
        seen = interfaces("healthy", node.name)
        (problem,) = check_pinning(inv.node_env(node), seen, inv.fabric.subnet, set(), node)
        assert problem.remedy.startswith(f"set {key}.GLOO_SOCKET_IFNAME to the fabric interface")
