"""A plan skeleton from the Ansible inventory a cluster already has: the nodes and how SSH
reaches them, every other key the plan's schema requires written `TODO`, and a note for
each thing of the inventory that the skeleton does not carry (docs/internals.md#ansible-import).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infergate.plan import values as v
from infergate.plan.ansible_inventory import AnsibleError as AnsibleError
from infergate.plan.ansible_inventory import Hosts, ansible_hosts
from infergate.plan.ansible_list import listed_hosts
from infergate.plan.ansible_ssh import plan_node
from infergate.plan.schema import plan_schema
from infergate.plan.values import TODO

# keys a multi-node plan must set although the parser has defaults (one GPU rank, tp 1)
_ALSO_TODO = {"nodes[0].gpus", "engine.tensor_parallel"}
_NAMED = 8  # hosts a note names before "and N more"


@dataclass(frozen=True)
class Skeleton:
    """The plan skeleton's YAML text, and the notes: one line each, naming the hosts."""

    text: str
    notes: tuple[str, ...]


def plan_from_ansible(path: Path, group: str | None = None, program: str | None = None) -> Skeleton:
    """The plan skeleton for the hosts of the Ansible inventory at PATH (of GROUP only, when
    given), read by PROGRAM (ansible-inventory) where given, else from its files; raise
    AnsibleError when PATH is not an inventory or names no host."""
    hosts = listed_hosts(program, path, group) if program else ansible_hosts(path, group)
    nodes: list[dict[str, Any]] = []
    noted: dict[str, list[str]] = {}  # what is said -> the hosts it is said of
    for host in hosts.chosen:
        node, not_carried = plan_node(host, hosts.vars[host])
        nodes.append(node)
        for name, why in not_carried:
            noted.setdefault(f"{name}: {why}", []).append(host)
    about = _shown(f"{path}" + (f" (group {group})" if group else ""))
    header = [
        f"# A plan skeleton from the Ansible inventory {about}, by `infergate plan from-ansible`.",
        "# Fill every TODO, then check it: infergate plan check --plan=THIS_FILE",
    ]
    plan = {"name": _plan_name(path, group), "nodes": nodes}
    text = "\n".join([*header, *_emit(plan_schema(), plan, v.ROOT, 0)]) + "\n"
    notes = [f"{_named(on, len(nodes))}: {said}" for said, on in noted.items()]
    return Skeleton(text, tuple(notes + _left_out(hosts, group, nodes)))


def _named(hosts: list[str], of: int) -> str:
    """HOSTS as a note names them: each, up to _NAMED; every host, when it is all OF them."""
    if len(hosts) == of > _NAMED:
        return f"every host ({of})"
    more = f", and {len(hosts) - _NAMED} more" if len(hosts) > _NAMED else ""
    return ", ".join(hosts[:_NAMED]) + more


def _left_out(hosts: Hosts, group: str | None, nodes: list[dict[str, Any]]) -> list[str]:
    """The note of the hosts outside GROUP, each a jump host of a node said so (the plan
    reaches it as a host of its own, never as a node)."""
    out = [host for host in hosts.vars if host not in hosts.chosen]
    if not out:
        return []
    jumps: dict[str, list[str]] = {}
    for node in nodes:
        hop = str(node.get("ssh", {}).get("jump", ""))
        jumps.setdefault(re.sub(r"^.*@|:[0-9]+$", "", hop).strip("[]"), []).append(node["name"])
    said = [_as_jump(host, hosts.vars[host], jumps) for host in out]
    return [f"left out, not in the group {group}: {', '.join(said)}"]


def _as_jump(host: str, host_vars: dict[str, Any], jumps: dict[str, list[str]]) -> str:
    address = host_vars.get("ansible_host", host_vars.get("ansible_ssh_host"))
    by_address = jumps.get(address, []) if isinstance(address, str) and address != host else []
    of = jumps.get(host, []) + by_address
    return f"{host} (the jump host of {', '.join(of)})" if of else host


def _shown(text: str) -> str:
    """TEXT for a comment line of the skeleton: a newline there would start a key."""
    return text if text.isprintable() else ascii(text)


def _plan_name(path: Path, group: str | None) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", group or path.stem).strip("-")[:128]
    return name or "cluster"


def _emit(schema: dict[str, Any], values: Any, path: str, depth: int) -> list[str]:
    """YAML lines for the mapping at PATH: the keys VALUES has, and every key the schema
    requires or _ALSO_TODO names, those that VALUES lacks as TODO."""
    lines: list[str] = []
    pad = "  " * depth
    for key, below in schema["properties"].items():
        here = v.join(path, key)
        if key not in values and key not in schema["required"] and here not in _ALSO_TODO:
            continue
        value = values.get(key, TODO)
        if "properties" in below:
            lines += [f"{pad}{key}:", *_emit(below, _dict(value), here, depth + 1)]
        elif isinstance(value, list) and "properties" in below["items"]:
            lines.append(f"{pad}{key}:")
            for item in value:
                item_lines = _emit(below["items"], item, f"{here}[0]", depth + 2)
                lines += [f"{pad}  - {item_lines[0].lstrip()}", *item_lines[1:]]
        else:
            lines.append(f"{pad}{key}: {_scalar(value, below)}")
    return lines


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _scalar(value: object, schema: dict[str, Any]) -> str:
    """VALUE as YAML (a JSON scalar is one), or TODO with what the key takes."""
    if value != TODO:
        return json.dumps(value)
    hint = schema.get("description") or ""
    if "enum" in schema:
        hint = f"one of {', '.join(schema['enum'])}"
    return f"{TODO}  # TODO: fill" + (f": {hint}" if hint else "")
