"""Running commands on this machine: always with a deadline, failures that say what ran."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from infergate_lab.layout import BUSYBOX_BIN

DEFAULT_TIMEOUT_S = 30.0
APT_TIMEOUT_S = 900.0


class LabError(RuntimeError):
    """The lab could not be made, changed or read; the message says what and where."""


@dataclass(frozen=True)
class Done:
    """What a finished command left: its exit status and its output as text."""

    returncode: int
    stdout: str
    stderr: str


def run(
    argv: Sequence[str],
    timeout: float = DEFAULT_TIMEOUT_S,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
) -> Done:
    """Run argv to completion; with `check`, a non-zero exit raises LabError quoting stderr."""
    try:
        done = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            timeout=timeout,
            env={**os.environ, **env} if env else None,
            cwd="/",  # a working directory that exists in every node's mount namespace
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise LabError(f"`{' '.join(argv)}` did not finish within {timeout:g} s") from None
    out, err = (b.decode(errors="replace") for b in (done.stdout, done.stderr))
    result = Done(done.returncode, out, err)
    if check and result.returncode != 0:
        msg = (result.stderr or result.stdout).strip()
        raise LabError(f"`{' '.join(argv)}` exited {result.returncode}: {msg}")
    return result


def mount_points() -> list[str]:
    """Every mount point in this mount namespace, from /proc/self/mountinfo."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [ln.split()[4].encode().decode("unicode_escape") for ln in lines]  # "\040" is " "


def mounted(path: str | Path) -> bool:
    """Whether path is a mount point here. os.path.ismount cannot tell a directory bound onto
    itself (same device on both sides), which is what the ns dir is."""
    return str(path) in mount_points()


def unmount(path: str | Path) -> None:
    """Unmount path if it is a mount point; one still busy (a process that entered a node's
    namespaces and outlived it) is detached lazily rather than left behind, where the next
    `up` would reuse it."""
    if mounted(path) and run(["umount", str(path)], check=False).returncode != 0:
        run(["umount", "-l", str(path)])


# Starts "$@" detached from us (reparented to init once this sh exits) in a new session,
# after moving itself into the cgroup whose cgroup.procs is $1, logging to $2; prints its
# pid. setsid does not fork here (a background job is no group leader), so every exec down
# to the real program keeps that pid.
_LAUNCH = r"""procs=$1 log=$2; shift 2
setsid sh -c 'echo $$ > "$1" && shift && exec "$@"' sh "$procs" "$@" </dev/null >>"$log" 2>&1 &
echo $!"""


def launch(argv: Sequence[str], cgroup_procs: Path, log: Path) -> int:
    """Start a long-lived process in a cgroup, owned by init rather than by this Python."""
    done = run(["sh", "-c", _LAUNCH, "sh", str(cgroup_procs), str(log), *argv], timeout=10)
    return int(done.stdout.strip())


# The commands the lab runs, and the Debian package that provides each.
NEEDED = {
    "ip": "iproute2",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "dockerd": "docker.io",
    "containerd": "containerd",
    "runc": "runc",
    "ping": "iputils-ping",  # the fabric checks ping inside the nodes
    "iptables": "iptables",  # the drop-port fault
    # a node's own Python (the suite's TCP probes, the memory hog): nodes do not see the
    # controller's /root, where pyenv and the project's virtualenv interpreter live
    "/usr/bin/python3": "python3-minimal",
}
PATH_EXTRA = "/usr/sbin:/sbin"


def which(cmd: str) -> str | None:
    return shutil.which(cmd, path=f"{os.environ.get('PATH', '')}:{PATH_EXTRA}")


def busybox_is_static() -> bool:
    if not BUSYBOX_BIN.exists():
        return False
    return run(["ldd", str(BUSYBOX_BIN)], check=False).returncode != 0  # "not a dynamic executable"


def missing_packages(needed: Mapping[str, str] = NEEDED) -> list[str]:
    pkgs = {pkg for cmd, pkg in needed.items() if which(cmd) is None}
    if needed is NEEDED and not busybox_is_static():
        pkgs.add("busybox-static")
    return sorted(pkgs)


def ensure_packages(needed: Mapping[str, str] = NEEDED) -> list[str]:
    """Install the Debian packages whose commands are missing (the lab's, or those given:
    command -> package); returns what was installed."""
    pkgs = missing_packages(needed)
    if not pkgs:
        return []
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update"], timeout=APT_TIMEOUT_S, env=env)
    with _no_service_starts():
        run(
            ["apt-get", "install", "-y", "--no-install-recommends", *pkgs],
            timeout=APT_TIMEOUT_S,
            env=env,
        )
    return pkgs


POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


@contextmanager
def _no_service_starts() -> Iterator[None]:
    """Debian's policy-rc.d hook: keep the packages' postinst from starting a host-wide
    dockerd or sshd, which would be machine-wide state the lab did not mean to make."""
    if POLICY_RC_D.exists():
        yield
        return
    POLICY_RC_D.write_text("#!/bin/sh\nexit 101\n")
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)
