"""A host's Ansible connection vars as a plan's node (docs/internals.md#ansible-import): what
the plan can say is carried over (address, user, port, key, jump, connection local), each
read by the plan's own reader of the key it fills; every other connection setting, and every
vault-encrypted value, is a note naming the var, never its value (it may be a secret).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

from infergate.plan import values as v
from infergate.plan import words as w
from infergate.plan.values import TODO

SSH_ARGS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")  # ssh takes the first's jump
_CARRIED = {
    "user": ("ansible_user", "ansible_ssh_user"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "key": ("ansible_ssh_private_key_file", "ansible_private_key_file"),
}
_ADDRESS = ("ansible_host", "ansible_ssh_host")
_PASSWORD = "a password is not carried over: the plan logs in with a key or the SSH agent"
# Ansible's behavioral inventory parameters that the plan has no key for
_NOT_CARRIED = {
    "ansible_password": _PASSWORD,
    "ansible_ssh_pass": _PASSWORD,
    "ansible_ssh_password": _PASSWORD,
    "ansible_ssh_executable": "not carried over: infergate runs the ssh on its PATH",
}
_BECOME = re.compile(r"ansible_(become|sudo|su)(_\w+)?")  # and the names before `become`
_BECOME_WHY = "not carried over: infergate runs every command as the SSH user, never with become"
_SSH_CONNECTIONS = ("ssh", "smart", "local")  # "smart" is Ansible's name for its ssh default
_WITH_VALUE = frozenset("BbcDEeFIiJLlmOoPpQRSWw")  # ssh's options that take a value
_HARMLESS = frozenset("46AaCkNnqTvXxYy")  # ssh's flags that change neither host nor user
_FORWARDS = ("%h:%p", "[%h]:%p")
_NAMES_A_JUMP = re.compile(r"(?i)proxyjump|proxycommand|(?<!\S)-J")
_PROXY_FORM = (
    "a ProxyCommand not of the form `ssh -W %h:%p [-p PORT] [user@]host` is not guessed: the "
    "jump is left TODO"
)

Note = tuple[str, str]  # (the var, why it is not carried over)


class Vaulted:
    """A value Ansible Vault encrypts (`!vault` in YAML, {"__ansible_vault": ...} from
    ansible-inventory): never decrypted, so never carried over."""

    def __repr__(self) -> str:
        return "<vault-encrypted>"


VAULTED = Vaulted()


def templated(value: object) -> bool:
    return isinstance(value, str) and "{{" in value


def plan_node(host: str, host_vars: dict[str, Any]) -> tuple[dict[str, Any], list[Note]]:
    """HOST as a node of the plan, from its vars (a value Ansible would template left TODO),
    and a note for each connection setting the node does not carry."""

    def var(*names: str) -> Any:
        found = next((host_vars[n] for n in names if n in host_vars), None)
        return None if found is VAULTED else TODO if templated(found) else found

    jump, notes = _jump(host_vars)
    connection = var("ansible_connection")
    ssh = {key: var(*names) for key, names in _CARRIED.items()}
    ssh |= {"jump": jump, "connection": "local" if connection == "local" else None}
    node = {
        "name": host,
        "address": var(*_ADDRESS) or host,
        "ssh": {key: value for key, value in ssh.items() if value is not None},
    }
    notes += [(name, why) for name, value in host_vars.items() if (why := _why(name, value))]
    return {key: value for key, value in node.items() if value != {}}, list(dict.fromkeys(notes))


def _why(name: str, value: object) -> str | None:
    """Why the var NAME is not carried over (None: it is, or it is no connection setting)."""
    if value is VAULTED:
        carried = name in _READERS and name not in SSH_ARGS
        return "vault-encrypted, " + ("so not carried over: write it in" if carried else "skipped")
    if name in _NOT_CARRIED:
        return _NOT_CARRIED[name]
    if _BECOME.fullmatch(name):
        return _BECOME_WHY
    if name == "ansible_connection" and value not in _SSH_CONNECTIONS and not templated(value):
        return (
            f"{v.quoted(str(value))} is not carried over: the plan reaches a node by ssh "
            "(or local, for this controller)"
        )
    return None


def _jump(host_vars: dict[str, Any]) -> tuple[str | None, list[Note]]:
    """The jump host that the ssh args vars name, the first found (as ssh takes it), and a
    note for each option of theirs that the plan does not carry."""
    jump: str | None = None
    notes: list[Note] = []
    for name in SSH_ARGS:
        args = host_vars.get(name)
        if isinstance(args, str):
            hop, said = ssh_args(args)
            jump = jump or hop
            notes += [(name, why) for why in said]
    return jump, notes


def ssh_args(args: str) -> tuple[str | None, list[str]]:
    """The jump host of ssh ARGS (`-J HOST`, `-o ProxyJump=HOST`, `-o ProxyCommand="ssh -W
    %h:%p HOST"`), TODO where the plan cannot say it, and why each other option is not
    carried over."""
    if templated(args) and _NAMES_A_JUMP.search(args):
        return TODO, ["templated: Ansible makes its jump host at run time, so it is TODO"]
    if templated(args):
        return None, ["templated: Ansible makes it at run time, so it is not carried over"]
    try:
        words = shlex.split(args)
    except ValueError as e:
        return None, [f"cannot be split into words as a shell would ({e}): not carried over"]
    jump: str | None = None
    notes: list[str] = []
    for flag, value in _options(words):
        hop, why = _hop(flag, value)
        jump = jump or hop
        notes += [why] if why else []
    return jump, notes


def _options(words: list[str]) -> Iterator[tuple[str, str]]:
    """(flag, value) for each of ssh's options in WORDS, as its getopt reads them: `-J x`
    and `-Jx` give ("J", "x"), `-qC` gives ("q", "") and ("C", ""); a word that is no
    option gives ("", word)."""
    rest = iter(words)
    for word in rest:
        if not word.startswith("-") or word == "-":
            yield "", word
            continue
        for i, flag in enumerate(word[1:], start=2):
            if flag in _WITH_VALUE:
                yield flag, word[i:] or next(rest, "")
                break
            yield flag, ""


def _hop(flag: str, value: str) -> tuple[str | None, str | None]:
    """The jump host that one option of ssh names, if any; else why it is not carried."""
    if flag == "o":
        name, setting = _option(value)
        kind = name.lower()
        if setting.lower() == "none" and kind in ("proxyjump", "proxycommand"):
            return None, None
        if kind == "proxyjump":
            return _chain(setting)
        if kind == "proxycommand":
            hop = proxy_command(setting)
            return (hop, None) if hop else (TODO, _PROXY_FORM)
        return None, f"-o {name or 'that is no Name=value'} is not carried over"
    if flag == "J":
        return _chain(value)
    if not flag:
        return None, "an argument that is no ssh option is not carried over"
    return None, None if flag in _HARMLESS else f"-{flag} is not carried over"


def _option(text: str) -> tuple[str, str]:
    """`Name=value`, `Name value` or `Name = value` as ssh_config reads it: (name, value)."""
    found = re.fullmatch(r"\s*([A-Za-z]+)\s*(?:=\s*|\s+)(.*?)\s*", text)
    return (found[1], found[2]) if found else ("", "")


def _chain(hops: str) -> tuple[str | None, str | None]:
    """A ProxyJump's one host; a chain of them (a,b) the plan cannot say, so it is TODO."""
    if "," not in hops:
        return hops, None
    return TODO, "a chain of jump hosts is not carried over (TODO): the plan takes one per node"


def proxy_command(command: str) -> str | None:
    """The host a ProxyCommand of the form `ssh -W %h:%p [-q] [-p PORT] [-l USER]
    [user@]host` jumps through, as [user@]host[:port]; None for any other command."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or words[0].rpartition("/")[2] != "ssh":
        return None
    given: dict[str, list[str]] = {}
    for flag, value in _options(words[1:]):
        if flag not in _HARMLESS:
            given.setdefault(flag, []).append(value)
    once = {flag: values[0] for flag, values in given.items() if len(values) == 1}
    if once.keys() != given.keys() or set(once) - {"", "W", "p", "l"}:
        return None
    if once.get("W") not in _FORWARDS or not once.get(""):
        return None
    host, user = once[""], once.get("l")
    login = host if "@" in host or not user else f"{user}@{host}"
    return f"{login}:{once['p']}" if "p" in once else login


def read_ssh_args(value: object, where: str) -> str:
    """ansible_ssh_common_args (or _extra_args), once the jump host it names, if any, is one
    a plan takes."""
    found = v.text(value, where)
    hop = ssh_args(found)[0]
    if hop not in (None, TODO):
        w.jump(hop, where)
    return found


def _port(value: object, where: str) -> int:
    """ansible_port, an integer or its digits quoted (Ansible takes either)."""
    return v.PORT(
        int(value) if isinstance(value, str) and v.WHOLE_NUMBER.fullmatch(value) else value, where
    )


# the vars the skeleton takes, each read by the plan's reader of the key it fills
_READERS: dict[str, v.Reader[object]] = {
    **dict.fromkeys(_ADDRESS, v.host),
    **dict.fromkeys(_CARRIED["user"], w.user_name),
    **dict.fromkeys(_CARRIED["port"], _port),
    **dict.fromkeys(_CARRIED["key"], w.ssh_path),
    **dict.fromkeys(SSH_ARGS, read_ssh_args),
    "ansible_connection": v.text,
}


def mapping_of(value: object, where: str) -> dict[str, Any]:
    """A mapping; the error names what it got, never the value (a vars file holds secrets)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise v.InventoryError(where, f"expected a mapping, got a {type(value).__name__}")
    return {str(k): item for k, item in value.items()}


def read_vars(value: object, where: str) -> dict[str, Any]:
    """A mapping of vars, each that the skeleton takes read now, where its file and key are
    known (a value that Ansible would template, or that Vault encrypts, is left as it is)."""
    found = mapping_of(value, where)
    for name in found.keys() & _READERS.keys():
        if not templated(found[name]) and found[name] is not VAULTED:
            found[name] = _READERS[name](found[name], v.join(where, name))
    return found
