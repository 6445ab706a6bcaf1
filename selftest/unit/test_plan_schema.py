"""The plan's JSON Schema and docs/plan-keys.md agree with the parser they are read off: every
shipped plan validates, every key the parser reads is there, a key it refuses is refused.

No JSON Schema package is installed, so `problems` below walks the few keywords the schema uses.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.plan import values as v
from infergate.plan.model import InventoryError, parse_inventory
from infergate.plan.schema import DOCS_COMMAND, DRAFT, plan_keys_markdown, plan_schema

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted((ROOT / "inventories").glob("*.yaml"))
HOSTILE = ROOT / "selftest" / "data" / "plans-hostile"
# hostile plans refused for a value the schema can see (a bound, a pattern, a choice)
OUT_OF_BOUNDS = (
    "gpus-huge",
    "concurrency-huge",
    "hca-option",
    "fabric-interface-option",
    "thr-connect-timeout-huge",
    "thr-ready-negative",
    "ssh-user-option",
)
SCHEMA = plan_schema()
_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
    "integer": int,
    "number": (int, float),
}


def problems(schema: dict[str, Any], value: object, path: str = "") -> list[str]:
    """What VALUE breaks of SCHEMA (the keywords plan_schema uses), each at its path."""
    names = schema.get("type", [])
    names = [names] if isinstance(names, str) else names
    if names and not any(_is(value, name) for name in names):
        return [f"{path}: {value!r} is not {names}"]
    found = (
        [f"{path}: {value!r} not in {schema['enum']}"]
        if value not in schema.get("enum", [value])
        else []
    )
    if isinstance(value, int | float) and not isinstance(value, bool):
        found += _bounds(schema, value, path)
    if isinstance(value, str):
        found += _string(schema, value, path)
    if isinstance(value, list):
        found += [f"{path}: too short"] if len(value) < schema.get("minItems", 0) else []
        for i, item in enumerate(value):
            found += problems(schema.get("items", {}), item, f"{path}[{i}]")
    if isinstance(value, dict):
        found += _object(schema, value, path)
    return found


def _string(schema: dict[str, Any], value: str, path: str) -> list[str]:
    """Pattern and length; `$` as ECMA-262 reads it (Python's also matches before a last \\n)."""
    pattern = re.sub(r"\$$", r"\\Z", schema.get("pattern", ""))
    long = not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value))
    bad = long or not re.search(pattern, value)
    return [f"{path}: {value[:40]!r} does not match {pattern} or its length"] if bad else []


def _is(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return name == "boolean"
    return isinstance(value, _TYPES[name])


def _bounds(schema: dict[str, Any], value: float, path: str) -> list[str]:
    low, high = schema.get("minimum"), schema.get("maximum")
    above = schema.get("exclusiveMinimum")
    broken = (low is not None and value < low) or (high is not None and value > high)
    broken = broken or (above is not None and value <= above)
    return [f"{path}: {value} out of bounds"] if broken else []


def _object(schema: dict[str, Any], value: dict[str, Any], path: str) -> list[str]:
    found = [f"{path}.{key}: required" for key in schema.get("required", []) if key not in value]
    properties = schema.get("properties", {})
    for key, item in value.items():
        if key in properties:
            found += problems(properties[key], item, f"{path}.{key}")
        elif schema.get("additionalProperties") is False:
            found.append(f"{path}.{key}: not allowed")
        else:
            found += problems(schema.get("propertyNames", {}), key, f"{path}.{key} (name)")
            found += problems(schema.get("additionalProperties", {}), item, f"{path}.{key}")
    return found


def sections(schema: dict[str, Any], path: str = v.ROOT) -> dict[str, dict[str, Any]]:
    """Each object schema with fixed keys, by the key path the parser gives its first item."""
    if schema.get("type") == "array":
        return sections(schema["items"], f"{path}[0]")
    if "properties" not in schema:
        return {}
    found = {path: schema}
    for key, below in schema["properties"].items():
        found |= sections(below, v.join(path, key))
    return found


def at(data: Any, path: str) -> Any:
    """The mapping at a key path of SECTIONS in loaded plan DATA."""
    for part in [] if path == v.ROOT else path.replace("[0]", ".0").split("."):
        data = data[int(part)] if part == "0" else data.setdefault(part, {})
    return data


def test_the_schema_is_draft_2020_12_json() -> None:
    assert SCHEMA["$schema"] == DRAFT
    assert json.loads(json.dumps(SCHEMA)) == SCHEMA


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.stem)
def test_shipped_plan_is_valid_under_the_schema(plan: Path) -> None:
    assert problems(SCHEMA, yaml.safe_load(plan.read_text())) == []


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.stem)
def test_every_key_the_parser_reads_is_in_the_schema(plan: Path) -> None:
    token = v.READS.set([])
    try:
        parse_inventory(yaml.safe_load(plan.read_text()))
        reads = v.READS.get() or []
    finally:
        v.READS.reset(token)
    schemas = sections(SCHEMA)
    for read in reads:
        section = re.sub(r"\[\d+\]", "[0]", read.section)
        assert set(schemas[section]["properties"]) == set(read.known), section


@pytest.mark.parametrize("section", sorted(sections(SCHEMA)))
def test_a_key_the_parser_refuses_the_schema_refuses(section: str) -> None:
    data = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    data["inference"] = {"probes": [{"prompt": "p", "expect": "e"}]}
    at(data, section)["colour"] = "blue"
    with pytest.raises(InventoryError, match="unknown key"):
        parse_inventory(copy.deepcopy(data))
    assert any(p.endswith(".colour: not allowed") for p in problems(SCHEMA, data))


@pytest.mark.parametrize("name", OUT_OF_BOUNDS)
def test_a_value_out_of_bounds_the_schema_refuses(name: str) -> None:
    data = yaml.safe_load((HOSTILE / f"{name}.yaml").read_text())
    with pytest.raises(InventoryError):
        parse_inventory(copy.deepcopy(data))
    assert problems(SCHEMA, data) != []


def test_a_node_override_says_what_it_overrides() -> None:
    node = SCHEMA["properties"]["nodes"]["items"]["properties"]
    assert "fabric.interface" in node["fabric"]["properties"]["interface"]["description"]


def test_docs_plan_keys_is_generated_from_the_parser() -> None:
    committed = (ROOT / "docs" / "plan-keys.md").read_text(encoding="utf-8")
    assert committed == plan_keys_markdown(), f"docs/plan-keys.md is stale: run {DOCS_COMMAND}"


def test_docs_plan_keys_lists_every_key() -> None:
    markdown = plan_keys_markdown()
    for path, schema in sections(SCHEMA).items():
        shown = "" if path == v.ROOT else path.replace("[0]", "[]") + "."
        for key in schema["properties"]:
            assert f"| `{shown}{key}` |" in markdown


def schema_refusals() -> tuple[int, int]:
    """Of the hostile plans the parser refuses once loaded (not those the loader refuses
    first: no YAML, a bomb), how many the schema refuses too, and how many there are."""
    refused = caught = 0
    for path in sorted(HOSTILE.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            parse_inventory(copy.deepcopy(data))
        except InventoryError:
            refused += 1
            caught += problems(SCHEMA, data) != []
        except (yaml.YAMLError, UnicodeDecodeError, RecursionError, ValueError):
            continue
    return caught, refused


def test_the_schema_refuses_most_plans_the_parser_refuses() -> None:
    """Only `plan check` validates fully (docker_args, a jump's port, NaN); the schema holds
    the parser's patterns, bounds and lengths: it refused 24 of these 49, now 45."""
    caught, refused = schema_refusals()
    assert refused >= 49
    assert caught >= 45, f"the schema refuses {caught} of the {refused} plans"


def test_the_schema_says_what_it_does_not_check_and_what_false_trusts() -> None:
    assert "only `infergate plan check` validates a plan fully" in SCHEMA["description"]
    ssh = SCHEMA["properties"]["nodes"]["items"]["properties"]["ssh"]["properties"]
    assert "accept-new" in ssh["verify_host_key"]["description"]
    assert "any host key" not in json.dumps(SCHEMA)
