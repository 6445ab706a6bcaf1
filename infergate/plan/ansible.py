"""A plan skeleton from the Ansible inventory a cluster already has: the nodes and how SSH
reaches them, every other key the plan's schema requires written `TODO`
(docs/internals.md#ansible-import).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from infergate.plan import values as v
from infergate.plan.ansible_inventory import AnsibleError as AnsibleError
from infergate.plan.ansible_inventory import ansible_hosts, proxy_jump
from infergate.plan.schema import plan_schema
from infergate.plan.values import TODO

# keys a multi-node plan must set although the parser has defaults (one GPU rank, tp 1)
_ALSO_TODO = {"nodes[0].gpus", "engine.tensor_parallel"}


def plan_from_ansible(path: Path, group: str | None = None) -> str:
    """The plan skeleton (YAML text) for the hosts of the Ansible inventory at PATH (of GROUP
    only, when given); raise AnsibleError when PATH is not an inventory or names no host."""
    nodes = [_node(host, host_vars) for host, host_vars in ansible_hosts(path, group)]
    about = _shown(f"{path}" + (f" (group {group})" if group else ""))
    header = [
        f"# A plan skeleton from the Ansible inventory {about}, by `infergate plan from-ansible`.",
        "# Fill every TODO, then check it: infergate plan check --plan=THIS_FILE",
    ]
    plan = {"name": _plan_name(path, group), "nodes": nodes}
    return "\n".join([*header, *_emit(plan_schema(), plan, v.ROOT, 0)]) + "\n"


def _shown(text: str) -> str:
    """TEXT for a comment line of the skeleton: a newline there would start a key."""
    return text if text.isprintable() else ascii(text)


def _plan_name(path: Path, group: str | None) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", group or path.stem).strip("-")[:128]
    return name or "cluster"


def _node(host: str, host_vars: dict[str, Any]) -> dict[str, Any]:
    """A node of the plan from one host's vars; a value Ansible would template is left TODO."""

    def var(*names: str) -> Any:
        found = next((host_vars[n] for n in names if n in host_vars), None)
        return TODO if isinstance(found, str) and "{{" in found else found

    ssh = {
        "user": var("ansible_user", "ansible_ssh_user"),
        "port": var("ansible_port", "ansible_ssh_port"),
        "key": var("ansible_ssh_private_key_file", "ansible_private_key_file"),
        "jump": proxy_jump(str(var("ansible_ssh_common_args") or "")),
        "connection": "local" if var("ansible_connection") == "local" else None,
    }
    node = {
        "name": host,
        "address": var("ansible_host", "ansible_ssh_host") or host,
        "ssh": {key: value for key, value in ssh.items() if value is not None},
    }
    return {key: value for key, value in node.items() if value != {}}


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
