"""A throwaway sshd on a loopback port, for the unit tests that need a real node: its host
key, a client key it accepts for root, and nothing of the machine's own sshd setup."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from infergate.waiting import Deadline, wait_until

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSHD_START = Deadline(10, "SSHD_START")  # a throwaway sshd listens within a second
needs_sshd = pytest.mark.skipif(not Path(SSHD).exists(), reason="no sshd on this machine")


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@contextlib.contextmanager
def throwaway_sshd(folder: Path) -> Iterator[int]:
    """An sshd on 127.0.0.1 that accepts FOLDER/client for root, its host key FOLDER/host;
    its port, until it is stopped on exit."""
    for name in ("host", "client"):
        keygen(folder / name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host'}\n"
        f"PidFile {folder / 'pid'}\nUsePAM no\nStrictModes no\n"
        f"AuthorizedKeysFile {folder / 'client.pub'}\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    sshd = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(folder / "sshd_config")], stderr=subprocess.DEVNULL
    )
    try:
        _wait_listening(port, sshd)
        yield port
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    def listening() -> tuple[bool | None, str]:
        assert proc.poll() is None, "sshd exited"
        with socket.socket() as s:
            return (True if s.connect_ex(("127.0.0.1", port)) == 0 else None), "refused"

    wait_until(listening, f"sshd listening on {port}", SSHD_START, every_s=0.05)
