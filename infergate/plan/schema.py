"""The plan's JSON Schema and its key reference (docs/plan-keys.md), both read off the parser.

plan_schema parses a probe plan while values.READS is set, and so learns each section's keys
and their readers: a reader's bounds are in values.SCHEMAS, its type in its annotation, and a
key's description is the comment beside its field in plan/model.py. A field the parser reads
is in both the next time they are generated.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import inspect
import io
import json
import re
import sys
import tokenize
import types
import typing
from collections.abc import Callable, Mapping
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Any

from infergate.plan import values as v
from infergate.plan.model import NODE_OVERRIDES, parse_inventory

DRAFT = "https://json-schema.org/draft/2020-12/schema"
DOCS_COMMAND = "python scripts/plan_docs.py"

# The smallest plan that opens every section, each optional one empty, so that parsing it makes
# the parser read (and so name) every key it knows. Its values are never shown as defaults.
_PROBE: dict[str, object] = {
    "name": "probe",
    "nodes": [
        {"name": "n0", "address": "10.0.0.1", "ssh": {}, "fabric": {"address": "10.1.0.1/24"}}
    ],
    "fabric": {"interface": "eth0", "subnet": "10.1.0.0/24"},
    "image": {"ref": "probe:1"},
    "model": {"path": "/probe", "served_name": "probe"},
    "engine": {"kind": "vllm", "dist_init_addr": "10.1.0.1", "dist_init_port": 1, "api_port": 2},
    "thresholds": {},
    "allow": {},
    "inference": {
        "probes": [{"prompt": "p", "expect": "e"}],
        "slo": {},
        "ladder": {},
        "parity": {},
        "roofline": {},
    },
    "guard": {},
    "chaos": {},
}

_FIELD = re.compile(r"    (\w+): ")  # a field of a dataclass, as model.py writes one
_TYPES: dict[object, dict[str, object]] = {
    str: {"type": "string"},
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    IPv4Address: {"type": "string", "format": "ipv4"},
    IPv4Interface: {"type": "string", "description": "an IPv4 address with its prefix"},
    IPv4Network: {"type": "string", "description": "an IPv4 subnet like 192.168.200.0/24"},
}


def plan_schema() -> dict[str, Any]:
    """The plan's JSON Schema (draft 2020-12), for editors and for `infergate plan schema`."""
    trace = _Trace()
    return {
        "$schema": DRAFT,
        "title": "infergate plan",
        "description": "The deployment plan infergate checks a cluster against. This schema "
        "holds each key's type, bounds and the parser's patterns; only `infergate plan check` "
        "validates a plan fully (the rules between keys, engine.docker_args, jump hosts).",
        **trace.section(v.ROOT),
    }


class _Trace:
    """The reads of one parse of the probe plan, and what the parser made of it."""

    def __init__(self) -> None:
        token = v.READS.set([])
        try:
            self.plan = parse_inventory(copy.deepcopy(_PROBE))
            reads = v.READS.get() or []
        finally:
            v.READS.reset(token)
        self.sections: dict[str, dict[str, v.Read]] = {}
        self.docs: dict[type, dict[str, str]] = {}  # getsource parses model.py: 30 ms a class
        for read in reads:
            self.sections.setdefault(read.section, {})[read.key] = read

    def section(self, path: str) -> dict[str, Any]:
        """The object schema of the mapping at PATH, as its Section reads it."""
        reads = self.sections[path]
        missing = set(next(iter(reads.values())).known) - set(reads)
        if missing:  # a key the Section accepts but no need/get/maybe call reads
            raise TypeError(f"{path}: the parser never reads {sorted(missing)}")
        doc = _class_doc(type(self.value(path)))
        return {
            **({"description": doc} if doc else {}),
            "type": "object",
            "properties": {key: self.key(reads[key]) for key in reads[next(iter(reads))].known},
            "required": [key for key, read in reads.items() if read.how == "need"],
            "additionalProperties": False,
        }

    def key(self, read: v.Read) -> dict[str, Any]:
        path = v.join(read.section, read.key)
        schema = self.reader(read.reader, path)
        cls = type(self.value(read.section))
        if cls not in self.docs:
            self.docs[cls] = _field_docs(cls)
        comment = self.docs[cls].get(read.key)
        described = [comment or schema.pop("description", None)]
        schema.pop("description", None)
        override = NODE_OVERRIDES.get(_node_key(path) or "")
        if override:
            described.append(f"a node's own, over the plan's {override}")
        elif read.how != "need" and not self.probed(path):
            schema.update(_default(self.value(path)))
        if read.how == "maybe" and "null" not in _as_list(schema.get("type")):
            schema["type"] = [*_as_list(schema.get("type")), "null"]
        text = re.sub(r"\bNone\b", "null", "; ".join(d for d in described if d))
        return {**({"description": text} if text else {}), **schema}

    def reader(self, reader: v.Reader[object], path: str) -> dict[str, Any]:
        """The schema of the values READER accepts at PATH."""
        if path in self.sections:
            return self.section(path)
        if "type" in v.SCHEMAS.get(reader, {}):
            schema = dict(v.SCHEMAS[reader])
            items = schema.get("items")
            if callable(items):
                schema["items"] = self.reader(items, f"{path}[0]")
            return schema
        return _from_annotation(reader, path) | v.SCHEMAS.get(reader, {})

    def value(self, path: str) -> object:
        """What the parser made of the probe plan at PATH."""
        return _walk(self.plan, path, lambda node, key: getattr(node, key))

    def probed(self, path: str) -> bool:
        """Whether the probe plan sets PATH (its value then is no default)."""
        try:
            _walk(_PROBE, path, lambda node, key: node[key])
        except KeyError:
            return False
        return True


def _walk(root: object, path: str, child: Callable[[Any, str], object]) -> object:
    node = root
    for part in [] if path == v.ROOT else path.replace("[0]", ".0").split("."):
        node = node[0] if part == "0" else child(node, part)  # type: ignore[index]
    return node


def _node_key(path: str) -> str | None:
    """A node's key path below the node (fabric.interface), or None for a plan-wide key."""
    return path.removeprefix("nodes[0].") if path.startswith("nodes[0].") else None


def _from_annotation(reader: v.Reader[object], path: str) -> dict[str, Any]:
    """A plain reader's schema: its return type, described by its docstring's first line."""
    returns = typing.get_type_hints(reader).get("return")
    args = typing.get_args(returns)
    if typing.get_origin(returns) in (tuple, frozenset) and args[0] in _TYPES:
        schema: dict[str, Any] = {"type": "array", "items": dict(_TYPES[args[0]])}
    elif returns in _TYPES:
        schema = dict(_TYPES[returns])
    elif isinstance(returns, types.UnionType) and set(args) - {type(None)} <= set(_TYPES):
        names = [_TYPES[a]["type"] for a in args if a is not type(None)]
        schema = {"type": [*names, "null"] if type(None) in args else names}
    else:
        raise TypeError(
            f"{path}: no schema for its reader {reader.__qualname__} (returns {returns}); "
            "a section missing from plan.schema._PROBE, or a reader to describe in plan.values"
        )
    doc = _first_sentence(inspect.getdoc(reader) or "")
    return {**({"description": doc} if doc else {}), **schema}


def _first_sentence(doc: str) -> str:
    return doc.replace("\n", " ").split(". ")[0].removesuffix(".")


def _default(value: object) -> dict[str, object]:
    """The default as JSON, or none where the key's absence means "not planned"."""
    if value is None or dataclasses.is_dataclass(value):
        return {}
    if isinstance(value, Mapping):
        return {"default": dict(value)}
    if isinstance(value, frozenset):
        return {"default": sorted(value)}
    if isinstance(value, tuple):
        return {"default": list(value)}
    return {"default": value}


def _as_list(found: object) -> list[object]:
    return list(found) if isinstance(found, list) else [found] if found else []


def _class_doc(cls: type) -> str:
    """A class's own docstring; a dataclass without one has its signature there instead."""
    doc = cls.__doc__ or ""
    return "" if doc.startswith(f"{cls.__name__}(") else _first_sentence(doc)


@functools.cache
def _class_sources(module: str) -> dict[str, str]:
    """The source of each top-level class of MODULE, from one parse of its file: getsource
    parses the whole module again for each class (a second of CPU for the plan's sections)."""
    text = inspect.getsource(sys.modules[module])
    lines = text.splitlines(keepends=True)
    return {
        node.name: "".join(lines[node.lineno - 1 : node.end_lineno])
        for node in ast.parse(text).body
        if isinstance(node, ast.ClassDef)
    }


def _field_docs(cls: type) -> dict[str, str]:
    """The comment of each field of a dataclass: the comment lines above it and the one beside."""
    source = _class_sources(cls.__module__)[cls.__qualname__]
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    docs: dict[str, str] = {}
    above: list[str] = []
    for number, line in enumerate(source.splitlines(), start=1):
        field = _FIELD.match(line)
        if line.strip().startswith("#"):
            above.append(comments[number])
            continue
        if field:
            beside = [comments[number]] if number in comments else []
            docs[field[1]] = " ".join([*above, *beside])
        above = []
    return {name: doc for name, doc in docs.items() if doc}


def plan_keys_markdown() -> str:
    """docs/plan-keys.md: every plan key, read off the same schema as `infergate plan schema`."""
    header = [
        "# Plan keys",
        "",
        f"<!-- Generated from infergate's plan parser by `{DOCS_COMMAND}`; do not edit. -->",
        "",
        "Every key a plan may hold. A key not listed here is refused. *Required* keys have no",
        "default; *null* means the key may be null or left out, and then is not planned.",
        "The JSON Schema of the same keys: `infergate plan schema`.",
        "",
        "| Key | Type | Default | Allowed | Node override | Description |",
        "|---|---|---|---|---|---|",
    ]
    rows = _rows(plan_schema(), "", set())
    return "\n".join([*header, *rows]) + "\n"


def _rows(schema: dict[str, Any], path: str, required: set[str]) -> list[str]:
    """A table row for the key at PATH, then one for each key below it."""
    rows = [_row(schema, path, path.rpartition(".")[2] in required)] if path else []
    if schema.get("type") == "array" and "properties" in schema["items"]:
        return rows + _rows(schema["items"], f"{path}[]", set())
    for key, below in schema.get("properties", {}).items():
        rows += _rows(below, f"{path}.{key}" if path else key, set(schema["required"]))
    return rows


def _row(schema: dict[str, Any], path: str, required: bool) -> str:
    cells = [
        f"`{path}`",
        _type_name(schema),
        "required" if required else _json(schema["default"]) if "default" in schema else "",
        _allowed(schema),
        _override(path),
        schema.get("description", ""),
    ]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _type_name(schema: dict[str, Any]) -> str:
    names = _as_list(schema.get("type"))
    if "array" in names:
        return f"list of {_type_name(schema['items'])}"
    return " or ".join(str(name) for name in names)


def _allowed(schema: dict[str, Any]) -> str:
    """Choices, bounds or pattern, of the value or of a list's items."""
    if schema.get("type") == "array":
        least = f"at least {schema['minItems']}; " if "minItems" in schema else ""
        return (least + _allowed(schema["items"])).removesuffix("; ")
    if "enum" in schema:
        return ", ".join(f"`{choice}`" for choice in schema["enum"])
    low = f"> {schema['exclusiveMinimum']}" if "exclusiveMinimum" in schema else ""
    low = low or (f"≥ {schema['minimum']}" if "minimum" in schema else "")
    if low:
        return f"{low}, ≤ {schema['maximum']}"
    pattern = str(schema.get("pattern", "")).removeprefix("^(?:").removesuffix(")$")
    if not pattern.isprintable():  # a class of control characters: said in words
        said = ["not `-` first"] if "(?!-)" in pattern else []
        said.append("no control characters")
        said += [f"at most {schema['maxLength']} characters"] if "maxLength" in schema else []
        return ", ".join(said)
    return f"`{pattern}`" if pattern else ""


def _override(path: str) -> str:
    """How a node may set this key for itself: its own key, or the plan-wide key it replaces."""
    below = path.removeprefix("nodes[].")
    if below != path and below in NODE_OVERRIDES:
        return f"over `{NODE_OVERRIDES[below]}`"
    mine = [f"`nodes[].{node}`" for node, plan in NODE_OVERRIDES.items() if plan == path]
    return ", ".join(mine)


def _json(value: object) -> str:
    return f"`{json.dumps(value, ensure_ascii=False)}`"
