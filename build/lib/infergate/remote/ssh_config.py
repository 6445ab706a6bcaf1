"""The ssh_config the suite writes for a plan: one hardened Host block per node and per
external jump host, every value quoted, and master sockets keyed by the trust they were
opened under.

`verify_host_key: true` is StrictHostKeyChecking yes; `false` is accept-new against a
known_hosts file of this plan alone. The operator's own ssh_config (never a file the plan
names) is Included after every block, so it only fills what the plan leaves unset; every
master ends on its own after a finite idle time (docs/internals.md#ssh-config).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from infergate.plan.loader import PLAN_OPTION
from infergate.plan.model import Inventory, Node, Thresholds
from infergate.plan.values import NODE_NAME_RE
from infergate.problems import last_line

# ssh_config has no escape for these: a newline starts a new option (a ProxyCommand, say)
UNSAFE = re.compile(r'[\x00-\x1f\x7f"]')
GLOB = re.compile(r"[*?\[]")
_USERS_KNOWN_HOSTS = "~/.ssh/known_hosts"  # ssh's own default, named: never left to an Include
_JUMP = re.compile(
    r"(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9_.-]*)@)?"
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{1,5}))?"
)


USER_CONFIG_OPTION = "--ssh-user-config"
USER_CONFIG_ENV = "INFERGATE_SSH_CONFIG"
# `ssh -O exit` only asks the local master to end: one that does not answer is left to its
# own ControlPersist
MASTER_EXIT_S = 10
# a master the run or `down` ends itself still ends on its own this long after its last
# client, should its `ssh -O exit` be lost with a killed process
MASTER_IDLE_S = 60
MAX_PERSIST_S = 86_400  # --ssh-persist: a day at most
# sun_path holds 107 bytes; ssh listens first at the ControlPath plus `.` and 16 random letters
_CONTROL_PATH_MAX = 107 - 17
_CONTROL_NAME_LEN = 40 + 1 + 10  # %C (a SHA-1 in hex), '-', the digest
# the plan's ssh_config and known_hosts here, unused this long, are pruned
PRUNE_AFTER_S = 30 * 86_400
_PLAN_FILE = re.compile(r"(?:ssh_config|known_hosts)-[A-Za-z0-9._-]*-[0-9a-f]{12}(?:\.[0-9]+)?")


class SshConfigError(ValueError):
    """A plan value that cannot be written into an ssh_config safely; names the key."""

    def for_plan(self, plan: Path) -> str:
        """The usage error's line: the plan, then what is wrong in it."""
        return f"{PLAN_OPTION} {plan}: {self}"


class SshSetupError(SshConfigError):
    """The controller's side is wrong (the operator's ssh_config, the socket folder), not the
    plan: the message names the option or path and the fix."""

    def for_plan(self, plan: Path) -> str:
        return str(self)


def quoted(where: str, value: str, tokens: bool = False) -> str:
    """`value` in double quotes; `%` doubled where ssh expands %-tokens in that option."""
    if UNSAFE.search(value):
        raise SshConfigError(
            f"{where} = {value!r}: a control character or a double quote cannot be written "
            "into an ssh_config (a newline there would add an option of its own)"
        )
    return '"' + (value.replace("%", "%%") if tokens else value) + '"'


def ssh_config(
    inventory: Inventory,
    control_dir: Path,
    persist_s: int = 0,
    plan_known_hosts: Path | None = None,
    user: Path | None = None,
    resolve: bool = True,
) -> str:
    """A Host block per node, then per jump host outside the plan, then the Include of USER
    (the operator's ssh_config, checked by ssh_user_config) unless the plan turns it off.
    RESOLVE: ask `ssh -G` for each address in USER (`plan check` does not)."""
    own = plan_known_hosts or control_dir / "known_hosts"
    names = {n.name for n in inventory.nodes}
    reached = [n for n in inventory.nodes if n.ssh.connection == "ssh"]
    include = user if reached and reached[0].ssh.config else None
    blocks = [
        _node_block(n, i, inventory.thresholds, control_dir, persist_s, own, include, resolve)
        for i, n in enumerate(inventory.nodes)
    ]
    jumps: dict[str, str] = {}
    for i, node in enumerate(inventory.nodes):
        if node.ssh.jump and node.ssh.jump not in names:
            host, block = _jump_block(node, i, inventory.thresholds, own)
            jumps.setdefault(host, block)  # ssh takes the first match: the first node's
    tail = [_include(include)] if include else []
    return "\n\n".join([*blocks, *jumps.values(), *tail]) + "\n"


def _include(path: Path) -> str:
    """The Include of the operator's ssh_config, after `Match final` and `Match all`, so that
    their blocks for a node's address apply too (docs/internals.md#ssh-config)."""
    return "\n".join(["Match final", "Match all", f"  Include {quoted('ssh_config', str(path))}"])


def resolved_address(node: Node, include: Path | None) -> str:
    """The node's address as the operator's ssh_config resolves it (`ssh -G`, no network):
    ssh follows no HostName into another Host block, so an alias (`address: spark-a`) would
    reach it as a DNS name. A HostKeyAlias there is refused: it checks another host's key."""
    if include is None:
        return node.address
    argv = ["ssh", "-G", "-F", str(include), "--", node.address]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        raise SshSetupError(f"{include}: `ssh -G` did not evaluate it in 10 s") from None
    if done.returncode:
        raise SshSetupError(f"{include}: ssh cannot read it: {last_line(done.stderr)}")
    found = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    if "hostkeyalias" in found:
        raise SshSetupError(
            f"{node.where}: {include} sets HostKeyAlias {found['hostkeyalias']} for it, so "
            "its host key would be checked as another host's\n    fix: remove that "
            f"HostKeyAlias, or run with {USER_CONFIG_OPTION}=none"
        )
    return found.get("hostname", node.address)


def _node_block(
    node: Node,
    i: int,
    t: Thresholds,
    control_dir: Path,
    persist_s: int,
    own: Path,
    include: Path | None,
    resolve: bool,
) -> str:
    ssh, at = node.ssh, f"nodes[{i}]"
    if not NODE_NAME_RE.fullmatch(node.name):  # it becomes a Host pattern: no *, ?, ! or space
        raise SshConfigError(f"{at}.name = {node.name!r}: letters, digits, '.', '_', '-' only")
    local = ssh.connection == "local" or not resolve
    address = node.address if local else resolved_address(node, include)
    idle_s = persist_s or MASTER_IDLE_S
    lines = [
        f"Host {node.name}",
        f"  HostName {quoted(f'{at}.address', address, tokens=True)}",
        f"  User {quoted(f'{at}.ssh.user', ssh.user)}",
        f"  Port {int(ssh.port)}",
        # ProxyJump first: ssh then takes no ProxyCommand, as for ProxyCommand none
        *([f"  ProxyJump {_jump(node, at)[0]}"] if ssh.jump else []),
        *_hardening(t, proxy=not ssh.jump),
        *_trust(node, at, own),
        "  ControlMaster auto",
        # %C covers host, port, user and jump; not the key, known_hosts, strictness, persistence
        f"  ControlPath {_control_path(control_dir, master_digest(node, own, idle_s))}",
        f"  ControlPersist {idle_s}s",
    ]
    if ssh.key:
        lines += [
            f"  IdentityFile {quoted(f'{at}.ssh.key', ssh.key, tokens=True)}",
            "  IdentitiesOnly yes",
        ]
    return "\n".join(lines)


def _control_path(control_dir: Path, digest: str) -> str:
    """%C (host, port, user, jump) is ssh's token; the digest adds what %C leaves out. A path
    too long for a unix socket is refused here: ssh would only warn, and run without one."""
    length = len(os.fsencode(control_dir)) + 1 + _CONTROL_NAME_LEN
    if length > _CONTROL_PATH_MAX:
        raise SshSetupError(
            f"{control_dir}/%C-{digest}: the SSH master sockets' path would be {length} bytes, "
            f"over the {_CONTROL_PATH_MAX} a unix socket path leaves ssh\n    fix: set TMPDIR "
            "to a shorter folder (TMPDIR=/tmp)"
        )
    return quoted("control dir", f"{control_dir}/", tokens=True)[:-1] + f'%C-{digest}"'


def _hardening(t: Thresholds, proxy: bool = True) -> list[str]:
    """What no ssh_config of the operator's may change: no command of its own on the
    controller, nothing of the controller's forwarded to a node."""
    return [
        *(["  ProxyCommand none"] if proxy else []),
        "  PermitLocalCommand no",
        "  IgnoreUnknown KnownHostsCommand",  # OpenSSH before 8.5 has none to run
        "  KnownHostsCommand none",
        "  ForwardAgent no",
        "  ForwardX11 no",
        "  UpdateHostKeys no",
        "  BatchMode yes",
        f"  ConnectTimeout {max(1, round(t.connect_timeout_s))}",
        # a host that dies mid-command is noticed in ~6 s instead of never
        "  ServerAliveInterval 2",
        "  ServerAliveCountMax 3",
        "  LogLevel ERROR",
    ]


def _trust(node: Node, at: str, own: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """StrictHostKeyChecking and the known_hosts files it checks, always named (and, for
    accept-new, adds a first key to: the first file)."""
    ssh = node.ssh
    strict = "yes" if ssh.verify_host_key else "accept-new"
    path = ssh.known_hosts or (_USERS_KNOWN_HOSTS if ssh.verify_host_key else str(own))
    files = [quoted(f"{at}.ssh.known_hosts", path, tokens=True)]
    files += [f'"{e}"' for e in extra if e != path]
    return [f"  StrictHostKeyChecking {strict}", f"  UserKnownHostsFile {' '.join(files)}"]


def master_digest(node: Node, own: Path, persist_s: int) -> str:
    """A short hash of everything that decides whom the master trusts, and how long it
    lives: a strict run never reuses a master that a lax plan (or another key) opened."""
    ssh = node.ssh
    known = ssh.known_hosts or ("" if ssh.verify_host_key else str(own))
    trust = [ssh.user, ssh.key, known, ssh.verify_host_key, ssh.jump, persist_s]
    return hashlib.sha256(json.dumps(trust).encode()).hexdigest()[:10]


def _jump(node: Node, at: str) -> tuple[str, str]:
    """(the ProxyJump value, the jump's host name) from `ssh.jump`, refused unless it is a
    node name or [user@]host[:port]: ProxyJump also takes lists and URIs, which it is not."""
    jump = node.ssh.jump or ""
    found = _JUMP.fullmatch(jump)
    if not found:
        raise SshConfigError(f"{at}.ssh.jump = {jump!r}: a node name or [user@]host[:port]")
    return jump, found["host"].strip("[]")


def _jump_block(node: Node, i: int, t: Thresholds, own: Path) -> tuple[str, str]:
    """The same hardening for a jump host outside the plan: its host key checked like the
    node's (with the user's own known_hosts read as well: it was trusted there before),
    the node's key offered first, never a master of its own."""
    at = f"nodes[{i}]"
    _, host = _jump(node, at)
    lines = [f"Host {host}", *_hardening(t), *_trust(node, at, own, (_USERS_KNOWN_HOSTS,))]
    if node.ssh.key:
        lines.append(f"  IdentityFile {quoted(f'{at}.ssh.key', node.ssh.key, tokens=True)}")
    return host, "\n".join(lines)


def exit_masters(config: Path, nodes: Iterable[Node]) -> None:
    """Ask each node's master under CONFIG to end now (`ssh -O exit`); one that does not
    answer in MASTER_EXIT_S is left to its ControlPersist."""
    for node in nodes:
        if node.ssh.connection == "ssh":
            argv = ["ssh", "-F", str(config), "-O", "exit", node.name]
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(argv, capture_output=True, timeout=MASTER_EXIT_S, check=False)


def control_dir() -> Path:
    """This user's private directory for SSH master sockets, the plans' known_hosts and
    their ssh_configs (0700, refused if not ours)."""
    path = Path(tempfile.gettempdir()) / f"infergate-ssh-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.lstat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise SshSetupError(f"{path} must be a directory of this user with mode 0700")
    return path


def _plan_key(plan: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", plan.stem)[:40]
    return f"{stem}-{hashlib.sha256(str(plan.resolve()).encode()).hexdigest()[:12]}"


def plan_known_hosts(plan: Path) -> Path:
    """Where a plan that does not verify host keys records each node's first key: a file of
    this plan alone (keyed by its path), in this user's private directory, never the user's
    own known_hosts. It outlives the run (each use renews its time), so a changed key is refused."""
    path = control_dir() / f"known_hosts-{_plan_key(plan)}"
    with contextlib.suppress(FileNotFoundError):
        os.utime(path)
    return path


def plan_ssh_config(
    inventory: Inventory, plan: Path, user: Path | None, masters: Path | None = None
) -> Path:
    """The plan's ssh_config for the connections that live on their own (the cluster lock,
    `infergate down`, whose MASTERS are its own): the suite's trust and hardening, written
    beside the plan's known_hosts (replaced whole: no reader sees half); old ones pruned."""
    folder = control_dir()
    prune(folder, time.time())
    text = ssh_config(inventory, masters or folder, 0, plan_known_hosts(plan), user)
    path = folder / f"ssh_config-{_plan_key(plan)}"
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.replace(path)
    return path


def prune(folder: Path, now: float) -> list[str]:
    """Remove the plans' ssh_configs and known_hosts in FOLDER that no run used for
    PRUNE_AFTER_S (their time is renewed by each use): the names of those removed."""
    gone = []
    for entry in os.scandir(folder):
        if not _PLAN_FILE.fullmatch(entry.name):
            continue
        info = entry.stat(follow_symlinks=False)
        mine = stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()
        if mine and now - info.st_mtime > PRUNE_AFTER_S:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
            gone.append(entry.name)
    return gone


def ssh_command(config: Path, node: Node, command: str) -> list[str]:
    """COMMAND on NODE through the plan's ssh_config, on a connection of its own (never a
    master's), so that what it holds (the cluster lock) lives exactly as long as this one
    process; a local node runs it in sh."""
    if node.ssh.connection == "local":
        return ["sh", "-c", command]
    own = ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
    return ["ssh", "-F", str(config), "-T", *own, "--", node.name, command]
