"""The commands the suite runs on a node, the packages that provide them, and which of them a
node lacks. TOOLS is the one list: the README's table is generated from it
(scripts/tools_docs.py) and the host probe asks the node for each."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infergate.problems import Problem

if TYPE_CHECKING:  # facts reads the probe, which runs this module's section
    from infergate.checks import facts as read


@dataclass(frozen=True)
class Tool:
    """A command, the Debian/Ubuntu and RHEL packages that provide it, and what needs it."""

    name: str
    debian: str
    rhel: str
    used_for: str
    gpu_only: bool = False  # needed only on a node the plan gives GPUs


TOOLS = (
    Tool("ip", "iproute2", "iproute", "interfaces and addresses (`ip -j addr`)"),
    Tool("ss", "iproute2", "iproute", "ports in use (`ss -ltn`)"),
    Tool("ping", "iputils-ping", "iputils", "fabric reachability between nodes"),
    Tool("docker", "docker.io", "docker-ce", "the engine, the image, containers"),
    Tool("timeout", "coreutils", "coreutils", "a deadline on each probe section"),
    Tool("mktemp", "coreutils", "coreutils", "scratch files of the pings and the lock"),
    Tool("sha256sum", "coreutils", "coreutils", "the model's file hashes"),
    Tool("find", "findutils", "findutils", "the model directory's files and sizes"),
    Tool("findmnt", "util-linux", "util-linux", "free space and file system types"),
    Tool("flock", "util-linux", "util-linux", "the cluster lock"),
    Tool("ldconfig", "libc-bin", "glibc", "the CUDA driver library's path"),
    Tool("nvidia-smi", "nvidia-utils-VERSION", "nvidia-driver-cuda", "GPU facts", gpu_only=True),
)
BY_NAME = {t.name: t for t in TOOLS}
# the PATH the probe runs them from: an sbin off a non-root user's PATH is missing there too
TOOLS_SECTION = (
    "tools",
    f"for c in {' '.join(shlex.quote(t.name) for t in TOOLS)}; do "
    'command -v "$c" >/dev/null 2>&1 || echo "$c"; done; true',
)
DEBIAN_LIKE, RHEL_LIKE = {"debian", "ubuntu"}, {"rhel", "fedora", "centos", "rocky", "almalinux"}


def missing_tools(sections: read.Sections) -> tuple[str, ...]:
    """The needed commands the node lacks; none where the section is missing."""
    section = sections.get("tools")
    if section is None:
        return ()
    return tuple(line.strip() for line in section.text.splitlines() if line.strip() in BY_NAME)


def needed_missing(missing: tuple[str, ...], gpus: int) -> tuple[Tool, ...]:
    """The tools of MISSING this node needs: the GPU ones only where it has GPUs."""
    return tuple(BY_NAME[m] for m in missing if gpus or not BY_NAME[m].gpu_only)


def install_command(tools: tuple[Tool, ...], os_release: dict[str, str]) -> str:
    """The package manager's command for the node's family (os-release ID and ID_LIKE); both
    families' where it is neither."""
    family = {os_release.get("ID", ""), *os_release.get("ID_LIKE", "").split()}
    apt = "apt-get install -y " + " ".join(dict.fromkeys(t.debian for t in tools))
    dnf = "dnf install -y " + " ".join(dict.fromkeys(t.rhel for t in tools))
    if family & DEBIAN_LIKE:
        return apt
    if family & RHEL_LIKE:
        return dnf
    return f"{apt} (Debian, Ubuntu), or {dnf} (RHEL)"


def check_node_tools(missing: tuple[Tool, ...], os_release: dict[str, str]) -> list[Problem]:
    """One problem naming every command the node lacks, with its package."""
    if not missing:
        return []
    named = ", ".join(f"`{t.name}` ({t.debian} / {t.rhel})" for t in missing)
    remedy = install_command(missing, os_release)
    if any(t.name == "docker" for t in missing):
        remedy += "; docker-ce comes from Docker's own repository (docs.docker.com/engine/install)"
    remedy += " (where one is installed off the SSH user's PATH, as /usr/sbin, add its folder)"
    return [Problem(f"no {named} on the PATH", "every command the suite runs on a node", remedy)]
