"""Record the real ssh client's stderr for the ways a node can refuse the controller.

    python scripts/record_ssh_failures.py      # needs ssh, sshd and ssh-keygen; any user

Starts a throwaway `sshd -D` on 127.0.0.1 with host and client keys of its own in a temporary
directory, and connects with the ssh_config the suite writes (fixtures/hosts.ssh_config:
BatchMode, LogLevel ERROR, StrictHostKeyChecking yes, IdentitiesOnly), one case at a time.
Writes selftest/data/controller/ssh-<case>.txt: ssh's stderr as it came, CR LF and all.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from infergate.plan.model import Inventory, Ssh, parse_inventory
from infergate.remote.ssh_config import ssh_config
from infergate.waiting import Deadline, wait_until

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "selftest" / "data" / "controller"
LAB = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))
SSHD_START = Deadline(10, "SSHD_START")  # a throwaway sshd listens within a second


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@contextmanager
def sshd(tmp: Path, port: int, max_auth_tries: int = 6) -> Iterator[None]:
    config = tmp / f"sshd_config_{max_auth_tries}"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host_new'}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPidFile {tmp / 'sshd.pid'}\n"
        f"UsePAM no\nStrictModes no\nMaxAuthTries {max_auth_tries}\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)])
    try:
        wait_until(lambda: _listening(proc, port), f"sshd listening on {port}", SSHD_START)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _listening(proc: subprocess.Popen[bytes], port: int) -> tuple[bool | None, str]:
    if proc.poll() is not None:
        raise RuntimeError(f"sshd did not listen on {port} (exit {proc.poll()})")
    with socket.socket() as s:
        return (True if s.connect_ex(("127.0.0.1", port)) == 0 else None), "refused"


def plan(address: str, port: int, key: Path, known_hosts: Path) -> Inventory:
    node = dataclasses.replace(
        LAB.nodes[0],
        address=address,
        ssh=Ssh(
            user=os.environ.get("USER", "root"),
            port=port,
            key=str(key),
            known_hosts=str(known_hosts),
        ),
    )
    return dataclasses.replace(LAB, nodes=(node,))


def attempt(tmp: Path, inventory: Inventory, case: str) -> None:
    config = tmp / f"ssh_config_{case}"
    masters = tmp / f"ctl-{case}"  # a master of its own: an earlier case's would answer
    masters.mkdir(mode=0o700)
    config.write_text(ssh_config(inventory, masters, persist_s=1))
    done = subprocess.run(
        ["ssh", "-F", str(config), inventory.nodes[0].name, "true"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if case == "ok":  # the keys and the sshd work: the other cases fail for their own cause
        assert done.returncode == 0, done.stderr
        return
    (OUT / f"ssh-{case}.txt").write_bytes(done.stderr)
    print(f"{case}: exit {done.returncode}")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ig-sshrec-") as name:
        tmp = Path(name)
        os.chmod(tmp, 0o700)
        keygen(tmp / "host_new")
        old_host = keygen(tmp / "host_old")
        (tmp / "authorized_keys").write_text(keygen(tmp / "client") + "\n")
        keygen(tmp / "stranger")  # a key the node does not authorize
        port = free_port()
        new_host = (tmp / "host_new.pub").read_text().split()[:2]
        (tmp / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(new_host)}\n")
        (tmp / "known_hosts_old").write_text(f"[127.0.0.1]:{port} {old_host}\n")
        (tmp / "known_hosts_none").write_text("")
        (tmp / "open.key").write_bytes((tmp / "client").read_bytes())
        os.chmod(tmp / "open.key", 0o644)
        good, known = tmp / "client", tmp / "known_hosts"
        with sshd(tmp, port):
            attempt(tmp, plan("127.0.0.1", port, good, known), "ok")
            attempt(tmp, plan("127.0.0.1", port, good, tmp / "known_hosts_old"), "host-key-changed")
            attempt(
                tmp, plan("127.0.0.1", port, good, tmp / "known_hosts_none"), "host-key-unknown"
            )
            attempt(tmp, plan("127.0.0.1", port, tmp / "stranger", known), "permission-denied")
            attempt(tmp, plan("127.0.0.1", port, tmp / "open.key", known), "unprotected-key")
            attempt(tmp, plan("127.0.0.1", port, tmp / "absent", known), "identity-missing")
        with sshd(tmp, port, max_auth_tries=1):
            attempt(tmp, plan("127.0.0.1", port, tmp / "stranger", known), "too-many-auth")
        attempt(tmp, plan("127.0.0.1", free_port(), good, known), "connection-refused")
        attempt(tmp, plan("node1.invalid", port, good, known), "unresolvable")
        with socket.socket() as mute:  # the kernel completes the handshake; no banner follows
            mute.bind(("127.0.0.1", 0))
            mute.listen()
            mute_port = int(mute.getsockname()[1])
            attempt(tmp, plan("127.0.0.1", mute_port, good, known), "banner-timeout")
        with socket.socket() as rude:  # accepts, then closes before any banner (as MaxStartups)
            rude.bind(("127.0.0.1", 0))
            rude.listen()
            closer = threading.Thread(target=lambda: rude.accept()[0].close(), daemon=True)
            closer.start()
            attempt(tmp, plan("127.0.0.1", rude.getsockname()[1], good, known), "closed-at-banner")


if __name__ == "__main__":
    main()
