"""An Ansible inventory read as Ansible reads it (docs/internals.md#ansible-import): its hosts
and each host's vars, with `group_vars/` and `host_vars/` beside it. Every file goes through
the plan loader's guards, within the limits below, and every problem is an AnsibleError that
names the file, the line and the key. A `!vault` value is read as VAULTED, never decrypted.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import product
from math import prod
from pathlib import Path
from typing import Any, TypeVar

from infergate.plan import values as v
from infergate.plan.ansible_ssh import VAULTED, mapping_of, read_vars
from infergate.plan.loader import line_of, load_yaml, read_text
from infergate.plan.values import InventoryError

MAX_HOSTS = 4096  # a skeleton of this many nodes is within the plan loader's MAX_VALUES
MAX_GROUPS = 1024
MAX_NESTING = 16  # groups below groups below `all`
_RANGE = re.compile(r"\[([0-9]+):([0-9]+)\]")
_YAML_SUFFIXES = (".yml", ".yaml", ".json")
T = TypeVar("T")
_VAULT_TAG = {"!vault": VAULTED}  # Ansible Vault's: the value is never decrypted


class AnsibleError(InventoryError):
    """An InventoryError in one file of an Ansible inventory: the inventory or a vars file."""

    def __init__(self, file: Path, error: InventoryError) -> None:
        super().__init__(error.path, error.message, error.line)
        self.file = file


@contextmanager
def in_file(file: Path) -> Iterator[None]:
    """Each error inside as an AnsibleError of FILE (an inner file's stays its own)."""
    try:
        yield
    except AnsibleError:
        raise
    except InventoryError as e:
        raise AnsibleError(file, e) from None
    except (OSError, RuntimeError) as e:  # a folder not listed; a symlink loop (3.11), a recursion
        said = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise AnsibleError(file, InventoryError("", f"cannot be read: {said}")) from None


@dataclass
class _Group:
    hosts: dict[str, None] = field(default_factory=dict)  # an ordered set
    children: dict[str, None] = field(default_factory=dict)
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ansible:
    groups: dict[str, _Group] = field(default_factory=lambda: {"all": _Group()})
    host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    member_of: dict[str, dict[str, None]] = field(default_factory=dict)

    def group(self, name: object, where: str) -> str:
        """The group NAME (made if new), once it is a name that cannot leave group_vars/."""
        found = name_of(name, where)
        if found not in self.groups:
            if len(self.groups) >= MAX_GROUPS:
                raise InventoryError(where, f"over {MAX_GROUPS} groups")
            self.groups[found] = _Group()
        return found

    def add_child(self, group: str, child: object, where: str) -> str:
        found = self.group(child, where)
        self.groups[group].children[found] = None
        return found

    def add_host(self, group: str, host: str, where: str, host_vars: dict[str, Any]) -> None:
        if host not in self.host_vars:
            if len(self.host_vars) >= MAX_HOSTS:
                raise InventoryError(where, f"over {MAX_HOSTS} hosts")
            self.host_vars[host], self.member_of[host] = {}, {}
        self.groups[group].hosts[host] = None
        self.member_of[host][group] = None
        self.host_vars[host].update(host_vars)


def name_of(name: object, where: str) -> str:
    """A group or host name: a node name, so never '/', '..' or over 64 characters."""
    return v.NODE_NAME(str(name), where)


@dataclass(frozen=True)
class Hosts:
    """Every host of an inventory with its vars, in the order read; `chosen`: those of the
    group asked for (every host, without one), in the inventory's order."""

    vars: dict[str, dict[str, Any]]
    chosen: tuple[str, ...]


def ansible_hosts(path: Path, group: str | None) -> Hosts:
    """The hosts of the inventory at PATH, read from its files, and those of GROUP; raise
    AnsibleError when PATH is not an inventory or GROUP names no host."""
    ansible = _read(path)
    depths, chosen = chosen_hosts(ansible, path, group)
    _vars_beside(ansible, path.parent)
    return hosts_of(ansible, depths, chosen)


def chosen_hosts(
    ansible: Ansible, path: Path, group: str | None
) -> tuple[dict[str, int], list[str]]:
    """Each group's depth, and the hosts of GROUP (every host, without one); raise
    AnsibleError for groups that loop, an unknown group, or one without hosts."""
    with in_file(path):
        depths = _depths(ansible)
        hosts = _hosts(ansible, group or "all")
        if not hosts:
            raise InventoryError(group or "all", f"no hosts in the Ansible inventory {path}")
    return depths, hosts


def hosts_of(ansible: Ansible, depths: dict[str, int], chosen: list[str]) -> Hosts:
    """Every host of ANSIBLE with its vars merged by precedence, and those CHOSEN."""
    parents = _parents(ansible)
    every = {host: _host_vars(ansible, host, depths, parents) for host in ansible.host_vars}
    return Hosts(every, tuple(chosen))


def _read(path: Path) -> Ansible:
    with in_file(path):
        text = read_text(path)
        if path.suffix in _YAML_SUFFIXES:
            return _yaml_file(text, _from_yaml)
        return _from_ini(text)


def _yaml_file(text: str, read: Callable[[object], T]) -> T:
    """READ of the YAML document in TEXT, loaded as a plan is; an error names its line."""
    data, lines = load_yaml(text, _VAULT_TAG)
    try:
        return read(data)
    except InventoryError as e:
        raise InventoryError(e.path, e.message, e.line or line_of(e.path, lines)) from None


def _depths(ansible: Ansible) -> dict[str, int]:
    """Each group's depth below `all` (its longest way down, which orders precedence); raise
    InventoryError for groups among their own children, or nested past MAX_NESTING."""
    order: list[str] = []
    done: dict[str, bool] = {}  # False while the walk is below the group

    def visit(group: str, above: tuple[str, ...]) -> None:
        if done.get(group):
            return
        if group in done:
            loop = " > ".join([*above[above.index(group) :], group])
            raise InventoryError(group, f"groups are children of each other: {loop}")
        if len(above) > MAX_NESTING:
            raise InventoryError(group, f"groups nested deeper than {MAX_NESTING} levels")
        done[group] = False
        for child in ansible.groups[group].children:
            visit(child, (*above, group))
        done[group] = True
        order.append(group)

    for group in ansible.groups:
        visit(group, ())
    depths = dict.fromkeys(ansible.groups, 0)
    for group in reversed(order):
        for child in ansible.groups[group].children:
            depths[child] = max(depths[child], depths[group] + 1)
            if depths[child] > MAX_NESTING:
                raise InventoryError(child, f"groups nested deeper than {MAX_NESTING} levels")
    return depths


def _from_yaml(data: object) -> Ansible:
    if not isinstance(data, dict) or not data:
        raise InventoryError("", "not an Ansible inventory: no groups at the top")
    ansible = Ansible()
    for name, body in data.items():
        where = str(name)
        group = ansible.group(name, where)
        _yaml_group(ansible, group, body, where)
        if group != "all":
            ansible.add_child("all", group, where)
    return ansible


def _yaml_group(ansible: Ansible, name: str, body: object, path: str) -> None:
    """One group of a YAML inventory: `hosts`, `vars` and `children`, each optional."""
    body = {} if body is None else body
    if not isinstance(body, dict) or set(body) - {"hosts", "vars", "children"}:
        raise InventoryError(path, "not an Ansible group: expected hosts, vars or children")
    ansible.groups[name].vars.update(read_vars(body.get("vars"), v.join(path, "vars")))
    hosts = v.join(path, "hosts")
    for pattern, host_vars in mapping_of(body.get("hosts"), hosts).items():
        where = v.join(hosts, pattern)
        found = read_vars(host_vars, where)
        for host in _expand(pattern, where):
            ansible.add_host(name, host, where, found)
    children = v.join(path, "children")
    for child, child_body in mapping_of(body.get("children"), children).items():
        where = v.join(children, child)
        _yaml_group(ansible, ansible.add_child(name, child, where), child_body, where)


def _from_ini(text: str) -> Ansible:
    """Ansible's INI form: hosts before any section are ungrouped (and so in `all`)."""
    ansible, section = Ansible(), "ungrouped"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        try:
            if line.startswith("["):
                section = _ini_section(line)
                ansible.group(section.partition(":")[0], f"[{section}]")
            else:
                _ini_line(ansible, section, line)
        except InventoryError as e:
            raise InventoryError(e.path, e.message, number) from None
    children = {child for g in ansible.groups.values() for child in g.children}
    for name in [g for g in ansible.groups if g != "all" and g not in children]:
        ansible.add_child("all", name, "")
    return ansible


def _ini_section(line: str) -> str:
    """The section a `[...]` line opens; an error never quotes it (nor any line)."""
    if not line.endswith("]") or line.count("[") != 1:
        raise InventoryError("", "this line is not an INI section like [group]")
    name = line[1:-1].strip()
    if name.partition(":")[2] not in ("", "vars", "children"):
        raise InventoryError("", "in this section, only :vars and :children may follow a group")
    return name


def _ini_line(ansible: Ansible, section: str, line: str) -> None:
    """One line of SECTION; an error names the line, never quotes it (it may hold a secret)."""
    group, _, kind = section.partition(":")
    where = f"[{section}]"
    ansible.group(group, where)
    if kind == "vars":
        key, equals, value = line.partition("=")
        if not equals:
            raise InventoryError(where, "this line is not key=value")
        found = {key.strip(): _ini_value(value.strip())}
        ansible.groups[group].vars.update(read_vars(found, where))
        return
    try:
        words = shlex.split(line, comments=True)
    except ValueError as e:
        raise InventoryError(where, f"this line cannot be split into words: {e}") from None
    if not words:
        return
    if kind == "children":
        ansible.add_child(group, words[0], where)
        return
    pairs = [word.partition("=") for word in words[1:]]
    if any(not equals for _, equals, _ in pairs):
        raise InventoryError(where, "host vars on this line are not all key=value")
    here = v.join(where, words[0])
    found = read_vars({k: _ini_value(value) for k, _, value in pairs}, here)
    for host in _expand(words[0], here):
        ansible.add_host(group, host, here, found)


def _ini_value(value: str) -> object:
    """An INI value as Ansible reads it: a Python literal where it is one (2222 the integer,
    '-o ProxyCommand="ssh ..."' the text inside its quotes), else the text as written."""
    try:
        with warnings.catch_warnings():  # an escape like '\d': Python warns, Ansible is silent
            warnings.simplefilter("ignore")
            return ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return value


def _expand(pattern: str, where: str) -> list[str]:
    """`node[01:04]` as Ansible expands it: node01 ... node04, leading zeros kept; each a
    node name, and at most MAX_HOSTS of them."""
    parts = _RANGE.split(pattern)
    bounds = list(zip(parts[1::3], parts[2::3], strict=True))
    sizes = [
        int(last) - int(first) + 1 if max(len(first), len(last)) <= 9 else MAX_HOSTS + 1
        for first, last in bounds
    ]  # each range counted too: an empty one makes the product 0, not the lists small
    if max(sizes, default=0) > MAX_HOSTS or prod(max(0, n) for n in sizes) > MAX_HOSTS:
        raise InventoryError(where, f"the range {v.quoted(pattern)} is over {MAX_HOSTS} hosts")
    numbers = [
        [
            f"{n:0{len(first) if first.startswith('0') else 0}d}"
            for n in range(int(first), int(last) + 1)
        ]
        for first, last in bounds
    ]
    texts = parts[0::3]
    hosts = [
        "".join(t + n for t, n in zip(texts, [*picked, ""], strict=True))
        for picked in product(*numbers)
    ]
    return [name_of(host, where) for host in hosts]


def _hosts(ansible: Ansible, group: str) -> list[str]:
    """The hosts of GROUP and of its children, in the inventory's order, each once."""
    if group not in ansible.groups:
        known = sorted(ansible.groups)
        more = f" and {len(known) - 20} more" if len(known) > 20 else ""
        raise InventoryError(
            group if v.NODE_NAME_RE.fullmatch(group) else v.quoted(group),
            f"no such group in the Ansible inventory; groups: {', '.join(known[:20])}{more}",
        )
    found: dict[str, None] = {}
    seen: set[str] = set()

    def collect(name: str) -> None:
        if name not in seen:
            seen.add(name)
            found.update(ansible.groups[name].hosts)
            for child in ansible.groups[name].children:
                collect(child)

    collect(group)
    return list(found)


def _vars_beside(ansible: Ansible, folder: Path) -> None:
    """group_vars/NAME[.yml] and host_vars/NAME[.yml] (or a folder of files), over inline vars."""
    for name, group in ansible.groups.items():
        group.vars.update(_vars_files(folder, "group_vars", name))
    for host, host_vars in ansible.host_vars.items():
        host_vars.update(_vars_files(folder, "host_vars", host))


def _vars_files(folder: Path, kind: str, name: str) -> dict[str, Any]:
    """KIND/NAME, KIND/NAME.yml (.yaml, .json), and such files in a folder KIND/NAME."""
    base = folder / kind / name
    found: dict[str, Any] = {}
    with in_file(base):
        folder_of_files = base.is_dir()
        plain = [] if folder_of_files else [base]
        suffixed = [base.with_name(name + suffix) for suffix in _YAML_SUFFIXES]
        inside = sorted(base.iterdir()) if folder_of_files else []
        inside = [f for f in inside if f.name[0] != "." and f.suffix in ("", *_YAML_SUFFIXES)]
        files = plain + suffixed + inside
        for file in [f for f in files if os.path.lexists(f)]:
            with in_file(file):
                found.update(_vars_file(file, folder))
    return found


def _vars_file(file: Path, folder: Path) -> dict[str, Any]:
    """One vars file: a regular file inside the inventory's FOLDER, read as a plan is."""
    real, root = file.resolve(), folder.resolve()
    if not real.is_relative_to(root):
        raise InventoryError("", f"leads out of the inventory's folder {root}: copy it in")
    return _yaml_file(read_text(file), lambda data: read_vars(data, v.ROOT))


def _parents(ansible: Ansible) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, group in ansible.groups.items():
        for child in group.children:
            found.setdefault(child, []).append(name)
    return found


def _host_vars(
    ansible: Ansible, host: str, depths: dict[str, int], parents: dict[str, list[str]]
) -> dict[str, Any]:
    """HOST's vars: `all`'s, each group's by depth (children over parents), then its own."""
    holding: set[str] = set()
    todo = [*ansible.member_of[host], "all"]
    while todo:
        group = todo.pop()
        if group not in holding:
            holding.add(group)
            todo += parents.get(group, [])
    merged: dict[str, Any] = {}
    for _, name in sorted((depths[g], g) for g in holding):
        merged.update(ansible.groups[name].vars)
    return merged | ansible.host_vars[host]
