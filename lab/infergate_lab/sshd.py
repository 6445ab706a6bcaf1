"""Each node's own sshd: own host key, listening on its management address only, root by key.

The lab's one client key pair logs in everywhere; known_hosts pins every node's host key
under its management address, so clients keep StrictHostKeyChecking on.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterable, Sequence

from infergate_lab import layout as L
from infergate_lab.layout import NodeSpec
from infergate_lab.shell import LabError, run


def _keygen(path: str, comment: str) -> None:
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path])


def ensure_client_key() -> None:
    L.SSH_DIR.mkdir(parents=True, exist_ok=True)
    if not L.CLIENT_KEY.exists():
        _keygen(str(L.CLIENT_KEY), "infergate-lab")
    pub = L.CLIENT_KEY.with_suffix(".pub").read_text()
    if not L.AUTHORIZED_KEYS.exists() or L.AUTHORIZED_KEYS.read_text() != pub:
        L.AUTHORIZED_KEYS.write_text(pub)


def config_text(spec: NodeSpec) -> str:
    return f"""\
# sshd of lab node {spec.name}; written by `python -m infergate_lab up`
ListenAddress {spec.mgmt_ip}
Port 22
PidFile {spec.sshd_pidfile}
HostKey {spec.host_key}
AuthorizedKeysFile {L.AUTHORIZED_KEYS}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# the key files live in the lab's own directories, not in ~/.ssh
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
# the suite multiplexes ~20 parallel sessions per node over one connection
MaxSessions 64
MaxStartups 64:30:128
Subsystem sftp internal-sftp
# a plain `docker` in any session talks to this node's own engine
SetEnv DOCKER_HOST={spec.docker_host}
"""


def ensure_node_files(spec: NodeSpec) -> None:
    if not spec.host_key.exists():
        _keygen(str(spec.host_key), f"root@{spec.name}")
    text = config_text(spec)
    if not spec.sshd_config.exists() or spec.sshd_config.read_text() != text:
        spec.sshd_config.write_text(text)


def argv(spec: NodeSpec) -> list[str]:
    sshd = shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin")
    if sshd is None:
        raise LabError("sshd is not installed (package openssh-server)")
    # -D: stay in the foreground, so the pid we record is the listener's; sshd re-execs
    # itself for each connection and needs its absolute path for that.
    run([sshd, "-t", "-f", str(spec.sshd_config)])  # a config error is named here, not lost
    return [sshd, "-D", "-f", str(spec.sshd_config), "-E", str(spec.log("sshd"))]


def write_known_hosts(specs: Iterable[NodeSpec]) -> None:
    lines = []
    for spec in specs:
        key_type, key = spec.host_key.with_suffix(".pub").read_text().split()[:2]
        lines.append(f"{spec.mgmt_ip} {key_type} {key}\n")
    L.KNOWN_HOSTS.write_text("".join(lines))


def port_open(spec: NodeSpec, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((spec.mgmt_ip, 22), timeout=timeout):
            return True
    except OSError:
        return False


def ssh_argv(spec: NodeSpec, command: Sequence[str], connect_timeout_s: int = 5) -> list[str]:
    """`ssh` to the node as the suite does: lab key, host key checked against known_hosts."""
    return [
        "ssh",
        "-i",
        str(L.CLIENT_KEY),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={L.KNOWN_HOSTS}",
        "-o",
        f"ConnectTimeout={connect_timeout_s}",
        "-o",
        "LogLevel=ERROR",
        f"root@{spec.mgmt_ip}",
        "--",
        *command,
    ]
