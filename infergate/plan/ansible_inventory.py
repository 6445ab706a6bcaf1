"""An Ansible inventory read as Ansible reads it (docs/internals.md#ansible-import): its hosts
and each host's vars, with `group_vars/` and `host_vars/` beside it. Every file goes through
the plan loader's guards, within the limits below, and every problem is an AnsibleError that
names the file, the line and the key.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import product
from math import prod
from pathlib import Path
from typing import Any, TypeVar

from infergate.plan import values as v
from infergate.plan import words as w
from infergate.plan.loader import line_of, load_yaml, read_text
from infergate.plan.values import TODO, InventoryError

MAX_HOSTS = 4096  # a skeleton of this many nodes is within the plan loader's MAX_VALUES
MAX_GROUPS = 1024
MAX_NESTING = 16  # groups below groups below `all`
_RANGE = re.compile(r"\[([0-9]+):([0-9]+)\]")
_PROXY_JUMP = re.compile(r"(?i)proxyjump\s*[= ]\s*(\S+)")
_YAML_SUFFIXES = (".yml", ".yaml", ".json")
T = TypeVar("T")


class AnsibleError(InventoryError):
    """An InventoryError in one file of an Ansible inventory: the inventory or a vars file."""

    def __init__(self, file: Path, error: InventoryError) -> None:
        super().__init__(error.path, error.message, error.line)
        self.file = file


@contextmanager
def _in(file: Path) -> Iterator[None]:
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
class _Ansible:
    groups: dict[str, _Group] = field(default_factory=lambda: {"all": _Group()})
    host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    member_of: dict[str, dict[str, None]] = field(default_factory=dict)

    def group(self, name: object, where: str) -> str:
        """The group NAME (made if new), once it is a name that cannot leave group_vars/."""
        found = _name(name, where)
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


def _name(name: object, where: str) -> str:
    """A group or host name: a node name, so never '/', '..' or over 64 characters."""
    return v.NODE_NAME(str(name), where)


def ansible_hosts(path: Path, group: str | None) -> list[tuple[str, dict[str, Any]]]:
    """Each host of the inventory at PATH (of GROUP only, when given), in its order, with its
    vars; raise AnsibleError when PATH is not an inventory or names no host."""
    ansible = _read(path)
    with _in(path):
        depths = _depths(ansible)
        hosts = _hosts(ansible, group or "all")
        if not hosts:
            raise InventoryError(group or "all", f"no hosts in the Ansible inventory {path}")
    _vars_beside(ansible, path.parent)
    parents = _parents(ansible)
    return [(host, _host_vars(ansible, host, depths, parents)) for host in hosts]


def _read(path: Path) -> _Ansible:
    with _in(path):
        text = read_text(path)
        if path.suffix in _YAML_SUFFIXES:
            return _yaml_file(text, _from_yaml)
        return _from_ini(text)


def _yaml_file(text: str, read: Callable[[object], T]) -> T:
    """READ of the YAML document in TEXT, loaded as a plan is; an error names its line."""
    data, lines = load_yaml(text)
    try:
        return read(data)
    except InventoryError as e:
        raise InventoryError(e.path, e.message, e.line or line_of(e.path, lines)) from None


def _depths(ansible: _Ansible) -> dict[str, int]:
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


def _from_yaml(data: object) -> _Ansible:
    if not isinstance(data, dict) or not data:
        raise InventoryError("", "not an Ansible inventory: no groups at the top")
    ansible = _Ansible()
    for name, body in data.items():
        where = str(name)
        group = ansible.group(name, where)
        _yaml_group(ansible, group, body, where)
        if group != "all":
            ansible.add_child("all", group, where)
    return ansible


def _yaml_group(ansible: _Ansible, name: str, body: object, path: str) -> None:
    """One group of a YAML inventory: `hosts`, `vars` and `children`, each optional."""
    body = {} if body is None else body
    if not isinstance(body, dict) or set(body) - {"hosts", "vars", "children"}:
        raise InventoryError(path, "not an Ansible group: expected hosts, vars or children")
    ansible.groups[name].vars.update(_vars(body.get("vars"), v.join(path, "vars")))
    hosts = v.join(path, "hosts")
    for pattern, host_vars in _mapping(body.get("hosts"), hosts).items():
        where = v.join(hosts, pattern)
        found = _vars(host_vars, where)
        for host in _expand(pattern, where):
            ansible.add_host(name, host, where, found)
    children = v.join(path, "children")
    for child, child_body in _mapping(body.get("children"), children).items():
        where = v.join(children, child)
        _yaml_group(ansible, ansible.add_child(name, child, where), child_body, where)


def _mapping(value: object, where: str) -> dict[str, Any]:
    """A mapping; the error names what it got, never the value (a vars file holds secrets)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InventoryError(where, f"expected a mapping, got a {type(value).__name__}")
    return {str(k): item for k, item in value.items()}


def _port(value: object, where: str) -> int:
    """ansible_port, an integer or its digits quoted (Ansible takes either)."""
    return v.PORT(
        int(value) if isinstance(value, str) and v.WHOLE_NUMBER.fullmatch(value) else value, where
    )


def _common_args(value: object, where: str) -> str:
    """ansible_ssh_common_args, once the jump host it names, if any, is one a plan takes."""
    found = v.text(value, where)
    hop = proxy_jump(found)
    if hop not in (None, TODO):
        w.jump(hop, where)
    return found


# the vars the skeleton takes, each read by the plan's reader of the key it fills
_READERS: dict[str, v.Reader[object]] = {
    "ansible_host": v.host,
    "ansible_ssh_host": v.host,
    "ansible_user": w.user_name,
    "ansible_ssh_user": w.user_name,
    "ansible_port": _port,
    "ansible_ssh_port": _port,
    "ansible_ssh_private_key_file": w.ssh_path,
    "ansible_private_key_file": w.ssh_path,
    "ansible_ssh_common_args": _common_args,
    "ansible_connection": v.text,
}


def _vars(value: object, where: str) -> dict[str, Any]:
    """A mapping of vars, each that the skeleton takes read now, where its file and key are
    known (a value that Ansible would template is left for a TODO)."""
    found = _mapping(value, where)
    for name in found.keys() & _READERS.keys():
        if not _templated(found[name]):
            found[name] = _READERS[name](found[name], v.join(where, name))
    return found


def _templated(value: object) -> bool:
    return isinstance(value, str) and "{{" in value


def _from_ini(text: str) -> _Ansible:
    """Ansible's INI form: hosts before any section are ungrouped (and so in `all`)."""
    ansible, section = _Ansible(), "ungrouped"
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


def _ini_line(ansible: _Ansible, section: str, line: str) -> None:
    """One line of SECTION; an error names the line, never quotes it (it may hold a secret)."""
    group, _, kind = section.partition(":")
    where = f"[{section}]"
    ansible.group(group, where)
    if kind == "vars":
        key, equals, value = line.partition("=")
        if not equals:
            raise InventoryError(where, "this line is not key=value")
        found = {key.strip(): _ini_value(value.strip().strip("'\""))}
        ansible.groups[group].vars.update(_vars(found, where))
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
    found = _vars({k: _ini_value(value) for k, _, value in pairs}, here)
    for host in _expand(words[0], here):
        ansible.add_host(group, host, here, found)


def _ini_value(value: str) -> object:
    """An INI value as Ansible reads a number: ansible_port=2222 is the integer 2222."""
    return int(value) if v.WHOLE_NUMBER.fullmatch(value) else value


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
    return [_name(host, where) for host in hosts]


def _hosts(ansible: _Ansible, group: str) -> list[str]:
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


def _vars_beside(ansible: _Ansible, folder: Path) -> None:
    """group_vars/NAME[.yml] and host_vars/NAME[.yml] (or a folder of files), over inline vars."""
    for name, group in ansible.groups.items():
        group.vars.update(_vars_files(folder, "group_vars", name))
    for host, host_vars in ansible.host_vars.items():
        host_vars.update(_vars_files(folder, "host_vars", host))


def _vars_files(folder: Path, kind: str, name: str) -> dict[str, Any]:
    """KIND/NAME, KIND/NAME.yml (.yaml, .json), and such files in a folder KIND/NAME."""
    base = folder / kind / name
    found: dict[str, Any] = {}
    with _in(base):
        folder_of_files = base.is_dir()
        plain = [] if folder_of_files else [base]
        suffixed = [base.with_name(name + suffix) for suffix in _YAML_SUFFIXES]
        inside = sorted(base.iterdir()) if folder_of_files else []
        inside = [f for f in inside if f.name[0] != "." and f.suffix in ("", *_YAML_SUFFIXES)]
        files = plain + suffixed + inside
        for file in [f for f in files if os.path.lexists(f)]:
            with _in(file):
                found.update(_vars_file(file, folder))
    return found


def _vars_file(file: Path, folder: Path) -> dict[str, Any]:
    """One vars file: a regular file inside the inventory's FOLDER, read as a plan is."""
    real, root = file.resolve(), folder.resolve()
    if not real.is_relative_to(root):
        raise InventoryError("", f"leads out of the inventory's folder {root}: copy it in")
    return _yaml_file(read_text(file), lambda data: _vars(data, v.ROOT))


def _parents(ansible: _Ansible) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, group in ansible.groups.items():
        for child in group.children:
            found.setdefault(child, []).append(name)
    return found


def _host_vars(
    ansible: _Ansible, host: str, depths: dict[str, int], parents: dict[str, list[str]]
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


def proxy_jump(args: str) -> str | None:
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
