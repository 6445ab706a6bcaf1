"""A plan skeleton from the Ansible inventory a cluster already has: the nodes and how SSH
reaches them, every other key the plan's schema requires written `TODO`. Both inventory
formats are read as Ansible reads them (docs/internals.md#ansible-import).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infergate.plan import values as v
from infergate.plan.model import InventoryError
from infergate.plan.schema import plan_schema

TODO = "TODO"
_RANGE = re.compile(r"\[([0-9]+):([0-9]+)\]")
_PROXY_JUMP = re.compile(r"(?i)proxyjump\s*[= ]\s*(\S+)")
_YAML_SUFFIXES = (".yml", ".yaml", ".json")
# keys a multi-node plan must set although the parser has defaults (one GPU rank, tp 1)
_ALSO_TODO = {"nodes[0].gpus", "engine.tensor_parallel"}


@dataclass
class _Group:
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Ansible:
    groups: dict[str, _Group] = field(default_factory=lambda: {"all": _Group()})
    host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)

    def group(self, name: str) -> _Group:
        return self.groups.setdefault(name, _Group())

    def add_host(self, group: str, host: str, host_vars: dict[str, Any]) -> None:
        if host not in self.group(group).hosts:
            self.group(group).hosts.append(host)
        self.host_vars.setdefault(host, {}).update(host_vars)


def plan_from_ansible(path: Path, group: str | None = None) -> str:
    """The plan skeleton (YAML text) for the hosts of the Ansible inventory at PATH (of GROUP
    only, when given); raise InventoryError when PATH is not an inventory or names no host."""
    ansible = _read(path)
    hosts = _hosts(ansible, group or "all")
    if not hosts:
        raise InventoryError(group or "all", f"no hosts in the Ansible inventory {path}")
    _vars_beside(ansible, path.parent)
    nodes = [_node(host, _host_vars(ansible, host)) for host in hosts]
    about = f"{path}" + (f" (group {group})" if group else "")
    header = [
        f"# A plan skeleton from the Ansible inventory {about}, by `infergate plan from-ansible`.",
        "# Fill every TODO, then check it: infergate plan check --inventory THIS_FILE",
    ]
    plan = {"name": _plan_name(path, group), "nodes": nodes}
    return "\n".join([*header, *_emit(plan_schema(), plan, v.ROOT, 0)]) + "\n"


def _plan_name(path: Path, group: str | None) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", group or path.stem).strip("-")
    return name or "cluster"


def _read(path: Path) -> _Ansible:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InventoryError("", f"cannot read the Ansible inventory {path}: {e}") from None
    ansible = (
        _from_yaml(_yaml(text, str(path)), str(path))
        if path.suffix in _YAML_SUFFIXES
        else _from_ini(text)
    )
    for group in list(ansible.groups):
        _refuse_loops(ansible, group, ())
    return ansible


def _refuse_loops(ansible: _Ansible, group: str, above: tuple[str, ...]) -> None:
    """A group among its own children would have Ansible (and these walks) recurse forever."""
    if group in above:
        raise InventoryError(
            group, f"groups are children of each other: {' > '.join([*above, group])}"
        )
    for child in ansible.groups[group].children:
        _refuse_loops(ansible, child, (*above, group))


def _yaml(text: str, where: str) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InventoryError("", f"{where} is not YAML: {e}") from None


def _from_yaml(data: object, where: str) -> _Ansible:
    if not isinstance(data, dict) or not data:
        raise InventoryError("", f"{where} is not an Ansible inventory: no groups at the top")
    ansible = _Ansible()
    for name, body in data.items():
        _yaml_group(ansible, str(name), body)
        if name != "all":
            ansible.group("all").children.append(str(name))
    return ansible


def _yaml_group(ansible: _Ansible, name: str, body: object) -> None:
    """One group of a YAML inventory: `hosts`, `vars` and `children`, each optional."""
    body = {} if body is None else body
    if not isinstance(body, dict) or set(body) - {"hosts", "vars", "children"}:
        raise InventoryError(name, "not an Ansible group: expected hosts, vars or children")
    ansible.group(name).vars.update(_mapping(body.get("vars"), f"{name}.vars"))
    for pattern, host_vars in _mapping(body.get("hosts"), f"{name}.hosts").items():
        for host in _expand(str(pattern)):
            ansible.add_host(name, host, _mapping(host_vars, f"{name}.hosts.{pattern}"))
    for child, child_body in _mapping(body.get("children"), f"{name}.children").items():
        ansible.group(name).children.append(str(child))
        _yaml_group(ansible, str(child), child_body)


def _mapping(value: object, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InventoryError(where, f"expected a mapping, got {v.describe(value)}")
    return {str(k): item for k, item in value.items()}


def _from_ini(text: str) -> _Ansible:
    """Ansible's INI form: hosts before any section are ungrouped (and so in `all`)."""
    ansible, section = _Ansible(), "ungrouped"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = _ini_section(line, number)
            if ":" not in section:
                ansible.group(section)
        else:
            _ini_line(ansible, section, line, number)
    for name in list(ansible.groups):
        if name != "all" and not _is_child(ansible, name):
            ansible.group("all").children.append(name)
    return ansible


def _ini_section(line: str, number: int) -> str:
    if not line.endswith("]") or line.count("[") != 1:
        raise InventoryError("", f"{line!r} is not an INI section like [group]", number)
    name = line[1:-1].strip()
    kind = name.partition(":")[2]
    if kind not in ("", "vars", "children"):
        raise InventoryError("", f"[{name}]: only :vars and :children follow a group", number)
    return name


def _ini_line(ansible: _Ansible, section: str, line: str, number: int) -> None:
    group, _, kind = section.partition(":")
    try:
        words = shlex.split(line, comments=True)
    except ValueError as e:
        raise InventoryError(f"[{section}]", f"{line!r}: {e}", number) from None
    if kind == "children":
        ansible.group(group).children.extend(words[:1])
    elif kind == "vars":
        key, equals, value = line.partition("=")
        if not equals:
            raise InventoryError(f"[{section}]", f"{line!r} is not key=value", number)
        ansible.group(group).vars[key.strip()] = _ini_value(value.strip().strip("'\""))
    else:
        pairs = [word.partition("=") for word in words[1:]]
        if any(not equals for _, equals, _ in pairs):
            raise InventoryError(f"[{section}]", f"{line!r}: host vars are key=value", number)
        for host in _expand(words[0]):
            ansible.add_host(group, host, {k: _ini_value(value) for k, _, value in pairs})


def _ini_value(value: str) -> object:
    """An INI value as Ansible reads a number: ansible_port=2222 is the integer 2222."""
    return int(value) if value.isdigit() else value


def _expand(pattern: str) -> list[str]:
    """`node[01:04]` as Ansible expands it: node01 ... node04, leading zeros kept."""
    match = _RANGE.search(pattern)
    if not match:
        return [pattern]
    first, last = match[1], match[2]
    width = len(first) if first.startswith("0") else 0
    head, tail = pattern[: match.start()], pattern[match.end() :]
    numbers = range(int(first), int(last) + 1)
    return [h for n in numbers for h in _expand(f"{head}{n:0{width}d}{tail}")]


def _is_child(ansible: _Ansible, name: str) -> bool:
    return any(name in g.children for g in ansible.groups.values())


def _hosts(ansible: _Ansible, group: str) -> list[str]:
    """The hosts of GROUP and of its children, in the inventory's order, each once."""
    if group not in ansible.groups:
        known = ", ".join(sorted(ansible.groups))
        raise InventoryError(group, f"no such group in the Ansible inventory; groups: {known}")
    found: list[str] = []
    for host in ansible.groups[group].hosts + [
        h for child in ansible.groups[group].children for h in _hosts(ansible, child)
    ]:
        found += [] if host in found else [host]
    return found


def _vars_beside(ansible: _Ansible, folder: Path) -> None:
    """group_vars/NAME[.yml] and host_vars/NAME[.yml] (or a folder of files), over inline vars."""
    for name, group in ansible.groups.items():
        group.vars.update(_vars_files(folder / "group_vars", name))
    for host, host_vars in ansible.host_vars.items():
        host_vars.update(_vars_files(folder / "host_vars", host))


def _vars_files(folder: Path, name: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    candidates = [folder / f"{name}{suffix}" for suffix in ("", *_YAML_SUFFIXES)]
    inside = sorted((folder / name).glob("*")) if (folder / name).is_dir() else []
    for file in [c for c in candidates if c.is_file()] + inside:
        found.update(_mapping(_yaml(file.read_text(encoding="utf-8"), str(file)), str(file)))
    return found


def _host_vars(ansible: _Ansible, host: str) -> dict[str, Any]:
    """HOST's vars: `all`'s, each group's by depth (children over parents), then its own."""
    merged: dict[str, Any] = {}
    for _, name in sorted(_groups_of(ansible, host, "all", 0)):
        merged.update(ansible.groups[name].vars)
    return merged | ansible.host_vars.get(host, {})


def _groups_of(ansible: _Ansible, host: str, group: str, depth: int) -> set[tuple[int, str]]:
    """(depth, group) for every group below GROUP that holds HOST, GROUP itself included."""
    below = {
        found
        for child in ansible.groups[group].children
        for found in _groups_of(ansible, host, child, depth + 1)
    }
    holds = host in ansible.groups[group].hosts or below or group == "all"
    return below | {(depth, group)} if holds else below


def _node(host: str, host_vars: dict[str, Any]) -> dict[str, Any]:
    """A node of the plan from one host's vars; a value Ansible would template is left TODO."""

    def var(*names: str) -> Any:
        found = next((host_vars[n] for n in names if n in host_vars), None)
        return TODO if isinstance(found, str) and "{{" in found else found

    ssh = {
        "user": var("ansible_user", "ansible_ssh_user"),
        "port": var("ansible_port", "ansible_ssh_port"),
        "key": var("ansible_ssh_private_key_file", "ansible_private_key_file"),
        "jump": _proxy_jump(str(var("ansible_ssh_common_args") or "")),
        "connection": "local" if var("ansible_connection") == "local" else None,
    }
    node = {
        "name": host,
        "address": var("ansible_host", "ansible_ssh_host") or host,
        "ssh": {key: value for key, value in ssh.items() if value is not None},
    }
    return {key: value for key, value in node.items() if value != {}}


def _proxy_jump(args: str) -> str | None:
    """The jump host of `-J HOST`, `-o ProxyJump=HOST` or `-o 'ProxyJump HOST'`, if any; a
    chain of hops (a,b) the plan cannot say, so it is left TODO."""
    try:
        words = shlex.split(args)
    except ValueError:
        return TODO
    pairs = list(zip(words, [*words[1:], ""], strict=False))
    options = [after if word == "-o" else word[2:] for word, after in pairs if word[:2] == "-o"]
    hops = [after for word, after in pairs if word == "-J"] + [
        found[1] for o in options if (found := _PROXY_JUMP.fullmatch(o.strip()))
    ]
    if not hops:
        return None
    return TODO if "," in hops[0] else hops[0]


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
