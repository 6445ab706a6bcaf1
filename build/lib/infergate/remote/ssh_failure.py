"""Why the controller's ssh could not reach a node, read from ssh's own stderr.

The texts are OpenSSH's (openssh-portable), each listed with its source file in
docs/internals.md#ssh-failures; the recorded forms are in selftest/data/controller/ssh-*.txt
(scripts/record_ssh_failures.py).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

from infergate.plan.model import Node
from infergate.problems import Problem

Judge = Callable[[str, Node, re.Match[str]], tuple[str, str]]


def check_ssh_failure(stderr: str, node: Node, key_readable: bool | None = None) -> Problem:
    """What ssh's stderr says went wrong, as the cause first and the fix for that cause.
    `key_readable`: whether the file of the node's nodes[].ssh.key can be read on this
    controller (ssh's own `not accessible` warning is hidden by the suite's LogLevel ERROR)."""
    text = stderr.replace("\r", "")
    if node.ssh.key and key_readable is False:
        found, remedy = _key_missing(node)
    else:
        found, remedy = _first_cause(text, node)
    return Problem(found=found, planned=_planned(node), remedy=remedy)


def _planned(node: Node) -> str:
    return f"`{_sh(*node.ssh_argv())}` logs in from here"


def _first_cause(text: str, node: Node) -> tuple[str, str]:
    for pattern, judge in _CAUSES:
        match = re.search(pattern, text)
        if match:
            return judge(text, node, match)
    said = text.strip().splitlines()[-1] if text.strip() else "no answer"
    return f"ssh failed: {said}", _generic(node)


def _generic(node: Node) -> str:
    ssh, *options = node.ssh_argv("true")
    return f"run `{_sh(ssh, '-v', *options)}` from this controller and fix what its last lines say"


def _sh(*words: str) -> str:
    """shlex.join, but a path's leading `~/` stays for the shell to expand."""
    return " ".join(
        f"~/{shlex.quote(w[2:])}" if w.startswith("~/") else shlex.quote(w) for w in words
    )


def _known_hosts(node: Node) -> str:
    return node.ssh.known_hosts or "~/.ssh/known_hosts"


def _host_pattern(node: Node) -> str:
    """How known_hosts names the node: `[address]:port` off port 22 (sshconnect.c
    put_host_port)."""
    port = node.ssh.port
    return node.address if port == 22 else f"[{node.address}]:{port}"


def _key_changed(text: str, node: Node, _m: re.Match[str]) -> tuple[str, str]:
    fingerprint = re.search(r"remote host is\s*\n?\s*(\S+?)\.?\n", text)
    offending = re.search(r"Offending \S+ key in (\S+):(\d+)", text)
    where = f" ({offending[1]} line {offending[2]})" if offending else ""
    sent = f"; it now sends {fingerprint[1]}" if fingerprint else ""
    known = offending[1] if offending else node.ssh.known_hosts
    remove = ["ssh-keygen", "-R", _host_pattern(node), *(["-f", known] if known else [])]
    return (
        f"the host key CHANGED since it was recorded{where}{sent}: possibly a reinstalled node, "
        "possibly a man in the middle",
        "verify the new key out of band (on the node's console: `ssh-keygen -lf "
        f"/etc/ssh/ssh_host_ed25519_key.pub`, compare with the fingerprint above), then "
        f"`{_sh(*remove)}` and record the verified key",
    )


def _key_unknown(_text: str, node: Node, _m: re.Match[str]) -> tuple[str, str]:
    known = _known_hosts(node)
    return (
        f"no host key for {_host_pattern(node)} in {known} (strict checking is on)",
        f"`{_sh('ssh-keyscan', '-p', str(node.ssh.port), node.address)}`, compare its "
        "fingerprint with the node's own (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` "
        f"on its console), then append the verified line to {known}",
    )


def _refused(_text: str, node: Node, _m: re.Match[str]) -> tuple[str, str]:
    port = node.ssh.port
    return (
        f"connection refused on {node.address}:{port}: the host is up, nothing listens there",
        "start sshd on the node (`systemctl start ssh` or `sshd`), or set "
        f"{node.key_of('ssh.port')} to the port it listens on (`ss -tlnp | grep sshd` there)",
    )


def _timed_out(_text: str, node: Node, m: re.Match[str]) -> tuple[str, str]:
    return (
        f"no answer from {node.address}:{node.ssh.port} ({m[0]}): the host is down or a "
        "firewall drops the packets",
        f"check that the node is powered on (`{_sh('ping', '-c', '3', node.address)}`, its "
        "BMC/console), "
        f"then that a firewall between here and it lets TCP {node.ssh.port} through",
    )


def _no_route(_text: str, node: Node, m: re.Match[str]) -> tuple[str, str]:
    return (
        f"{m[0]} to {node.address}: the host is down or not on that network",
        f"check {node.key_of('address')} {node.address} and that the node is up "
        f"(`{_sh('ip', 'route', 'get', node.address)}`, `{_sh('ping', '-c', '3', node.address)}`, "
        "its BMC/console)",
    )


def _banner(_text: str, node: Node, m: re.Match[str]) -> tuple[str, str]:
    return (
        f"TCP to {node.address}:{node.ssh.port} opens but no SSH greeting follows ({m[0]})",
        "on the node: is it sshd on that port, and is it hung or over MaxStartups "
        "(`systemctl status ssh`, `ss -tnp state established '( sport = :"
        f"{node.ssh.port} )'`); or a proxy/firewall in between holds the connection",
    )


def _closed_at_banner(_text: str, node: Node, m: re.Match[str]) -> tuple[str, str]:
    return (
        f"{node.address}:{node.ssh.port} closed the connection before the key exchange ({m[0]})",
        "on the node: sshd refuses this controller (MaxStartups reached, /etc/hosts.deny, "
        "sshd's `journalctl -u ssh` says which), or something other than sshd holds the port",
    )


def _unresolved(_text: str, node: Node, m: re.Match[str]) -> tuple[str, str]:
    return (
        f"the name {node.address} does not resolve on this controller ({m[1].strip()})",
        f"put the node's IP address in {node.key_of('address')}, or make {node.address} "
        "resolve here (DNS, /etc/hosts)",
    )


def _denied(_text: str, node: Node, m: re.Match[str]) -> tuple[str, str]:
    ssh = node.ssh
    found = f"{ssh.user}@{node.address} refused the key: Permission denied ({m[1]})"
    if not ssh.key:
        return found, (
            f"set {node.key_of('ssh.key')} to a private key the node authorizes (else ssh offers "
            f"this user's defaults), or authorize one: "
            f"`{_sh('ssh-copy-id', '-p', str(ssh.port), f'{ssh.user}@{node.address}')}`"
        )
    return found, (
        f"authorize {ssh.key}.pub for {ssh.user} on the node: "
        f"`{_sh('ssh-copy-id', '-i', ssh.key, '-p', str(ssh.port), f'{ssh.user}@{node.address}')}` "
        "(or append it to "
        f"~{ssh.user}/.ssh/authorized_keys there)"
    )


def _unprotected(text: str, node: Node, _m: re.Match[str]) -> tuple[str, str]:
    perms = re.search(r"Permissions (\d+) for '([^']+)' are too open", text)
    key = perms[2] if perms else node.ssh.key or "the key file"
    mode = f" (mode {perms[1]})" if perms else ""
    return (
        f"ssh ignores the private key {key}{mode}: readable by others",
        f"`{_sh('chmod', '600', key)}`",
    )


def _too_many(_text: str, node: Node, _m: re.Match[str]) -> tuple[str, str]:
    fix = (
        f"check that {node.ssh.key} is authorized there"
        if node.ssh.key
        else f"set {node.key_of('ssh.key')}: the suite then offers only that key (IdentitiesOnly)"
    )
    return (
        "the node disconnected: Too many authentication failures (more keys offered than "
        "its MaxAuthTries, none accepted)",
        fix,
    )


def _key_missing(node: Node) -> tuple[str, str]:
    key, login = node.ssh.key or "", f"{node.ssh.user}@{node.address}"
    return (
        f"{node.key_of('ssh.key')} {key} cannot be read on this controller",
        f"fix the path in {node.key_of('ssh.key')}, or create the key "
        f"(`{_sh('ssh-keygen', '-t', 'ed25519', '-f', key)}`) and authorize it: "
        f"`{_sh('ssh-copy-id', '-i', key, '-p', str(node.ssh.port), login)}`",
    )


# Most specific first: a changed key also prints "Host key verification failed.", an
# unprotected key ends in "Permission denied".
_CAUSES: tuple[tuple[str, Judge], ...] = (
    (r"REMOTE HOST IDENTIFICATION HAS CHANGED", _key_changed),
    (r"Host key verification failed", _key_unknown),
    (r"UNPROTECTED PRIVATE KEY FILE|Load key \"[^\"]*\": bad permissions", _unprotected),
    (r"Too many authentication failures", _too_many),
    (r"Permission denied \(([^)]*)\)", _denied),
    (r"Could not resolve hostname [^:]*:(.*)", _unresolved),
    (r"Connection refused", _refused),
    (r"Connection timed out during banner exchange", _banner),
    (r"kex_exchange_identification: .*", _closed_at_banner),
    (r"Connection timed out|Operation timed out", _timed_out),
    (r"No route to host|Network is unreachable", _no_route),
)
