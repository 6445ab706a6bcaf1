"""An Ansible inventory read by Ansible itself, `ansible-inventory -i PATH --list`, so its
inventory plugins, scripts and vars files work as in a playbook run; then through the file
reader's guards (docs/internals.md#ansible-import): names are node names, at most MAX_HOSTS
hosts, and the vars the skeleton takes read by the plan's readers. A vault value, which
ansible-inventory lists as {"__ansible_vault": ...}, is VAULTED, as `!vault` is in a file.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Any

from infergate.plan import values as v
from infergate.plan.ansible_inventory import (
    Ansible,
    Hosts,
    chosen_hosts,
    hosts_of,
    in_file,
    name_of,
)
from infergate.plan.ansible_ssh import VAULTED, mapping_of, read_vars
from infergate.plan.values import InventoryError

LIST_TIMEOUT_S = 120  # a cloud inventory plugin asks its API; a file is read in a second
MAX_LIST_BYTES = 64 * 1024 * 1024  # 4096 hosts with 16 KiB of vars each
# an inventory Ansible cannot parse is an error, as in a playbook run it would be a warning
# and no hosts
_STRICT = {
    "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
    "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true",
}


def listed_hosts(program: str, path: Path, group: str | None) -> Hosts:
    """The hosts of the inventory at PATH as PROGRAM (ansible-inventory) lists them, and
    those of GROUP; raise AnsibleError when it cannot list them or GROUP names no host."""
    with in_file(path):
        ansible = _from_list(_listed(program, path))
    return hosts_of(ansible, *chosen_hosts(ansible, path, group))


def _listed(program: str, path: Path) -> object:
    """PROGRAM -i PATH --list, its JSON read, within LIST_TIMEOUT_S and MAX_LIST_BYTES."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        _run([program, "-i", str(path), "--list"], out, err)
        if out.tell() > MAX_LIST_BYTES:
            raise InventoryError("", f"{program} listed over {MAX_LIST_BYTES // 2**20} MiB")
        out.seek(0)
        try:
            return json.load(out, object_hook=_vaulted)
        except (ValueError, RecursionError) as e:
            raise InventoryError("", f"{program} --list gave no JSON: {e}") from None


def _run(command: list[str], out: IO[bytes], err: IO[bytes]) -> None:
    """COMMAND, its output in OUT and ERR; raise InventoryError when it fails, in a line."""
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=os.environ | _STRICT,
            timeout=LIST_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InventoryError("", f"{command[0]} did not list it in {LIST_TIMEOUT_S} s") from None
    except OSError as e:
        raise InventoryError("", f"{command[0]} cannot be run: {e.strerror}") from None
    if done.returncode != 0:
        said = _said(err)
        raise InventoryError("", f"{command[0]} cannot list it (exit {done.returncode}): {said}")


def _said(err: IO[bytes]) -> str:
    """What ansible-inventory said on stderr, in a line: its errors and the first cause."""
    err.seek(0)
    lines = err.read(65536).decode(errors="replace").splitlines()
    errors = [line.removeprefix("[ERROR]: ") for line in lines if line.startswith("[ERROR]")]
    causes = [line.removeprefix("[WARNING]: ") for line in lines if "Failed to parse" in line]
    said = "; ".join(errors + causes[:1]) or next(reversed([x for x in lines if x.strip()]), "")
    return v.shown(said or "it said nothing")


def _vaulted(found: dict[str, Any]) -> object:
    return VAULTED if found.keys() == {"__ansible_vault"} else found


def _from_list(data: object) -> Ansible:
    """`--list`'s groups ({"hosts": [...], "children": [...]}) and `_meta.hostvars`, each
    host's vars merged by Ansible already."""
    listed = mapping_of(data, v.ROOT)
    hostvars = mapping_of(mapping_of(listed.pop("_meta", None), "_meta").get("hostvars"), "_meta")
    ansible = Ansible()
    for name, body in listed.items():
        group = ansible.group(name, name)
        found = mapping_of(body, name)
        for child in _names(found.get("children"), v.join(name, "children")):
            ansible.add_child(group, child, name)
        for host in _names(found.get("hosts"), v.join(name, "hosts")):
            where = v.join(name, host)
            ansible.add_host(group, name_of(host, where), where, {})
    for host in ansible.host_vars:
        ansible.host_vars[host] = read_vars(hostvars.get(host), host)
    return ansible


def _names(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InventoryError(where, "expected a list of names")
    return value
