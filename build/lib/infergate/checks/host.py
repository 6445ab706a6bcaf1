"""Host identity and the Docker engine: parsers of the probe's sections and their judges."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from infergate.problems import Problem


@dataclass(frozen=True)
class DockerEngine:
    """The CLI's and the daemon's versions (`server` None: the daemon did not answer), what
    the CLI said then, and `hung`: the limit `docker version` ran past with no answer."""

    client: str | None
    server: str | None
    error: str
    hung: str = ""


def parse_os_release(text: str) -> dict[str, str]:
    """Parse `cat /etc/os-release`.

    Sample line: ``PRETTY_NAME="Ubuntu 24.04.3 LTS"``
    """
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            words = shlex.split(value, comments=False) or [""]
            fields[key.strip()] = words[0]
    return fields


def parse_docker_version(text: str) -> DockerEngine:
    """Parse `docker version --format '{{json .}}'` (stdout and stderr together).

    With the daemon down, stdout has ``{"Client":{...},"Server":null}`` and stderr
    ``Cannot connect to the Docker daemon at unix:///var/run/docker.sock. ...``.
    """
    doc: object = {}
    start, end = text.find("{"), 0
    if start >= 0:
        try:
            doc, end = json.JSONDecoder().raw_decode(text, start)
        except json.JSONDecodeError:
            start = -1
    said = text if start < 0 else text[:start] + text[end:]
    if not isinstance(doc, dict):
        doc = {}
    return DockerEngine(_version(doc.get("Client")), _version(doc.get("Server")), said.strip())


def _version(part: object) -> str | None:
    if isinstance(part, dict) and isinstance(part.get("Version"), str):
        return str(part["Version"])
    return None


def check_docker_engine(engine: DockerEngine) -> list[Problem]:
    """The node's Docker engine answers; the CLI alone is not enough."""
    if engine.server:
        return []
    if engine.hung:
        found = f"`docker version` got no answer within {engine.hung}: the daemon hangs"
        remedy = (
            "read why in `journalctl -u docker -n 50` on the node (a hung storage driver or "
            "mount, say), then `sudo systemctl restart docker`"
        )
    elif engine.client is None:
        found = f"no docker CLI ({engine.error or 'command not found'})"
        remedy = "install Docker Engine (`apt-get install docker.io` or docker-ce), then retry"
    else:
        found = f"docker CLI {engine.client} but no engine answered: {engine.error or '(silent)'}"
        remedy = "start the engine: `sudo systemctl start docker`, then `docker info`"
        # the engine runs, but its socket is shut to this user
        if "permission denied" in (engine.error or ""):
            remedy = (
                "the plan's ssh user may not use the engine's socket: add it to the docker "
                "group on the node (`sudo usermod -aG docker USER`; the next ssh login has "
                "it), or connect as root"
            )
    return [Problem(found=found, planned="a running Docker engine", remedy=remedy)]


def check_identity(hostname: str, kernel: str, others: dict[str, str]) -> list[Problem]:
    """Facts were read, and the hostname is the node's own: a cloned image that kept its
    hostname confuses Ray and NCCL, which key ranks by hostname."""
    problems = []
    if not hostname or not kernel:
        problems.append(
            Problem(
                found=f"hostname {hostname!r}, kernel {kernel!r}",
                planned="hostname and kernel readable over SSH",
                remedy="run `hostname; uname -srm` on the node and fix what fails",
            )
        )
    twins = sorted(name for name, other in others.items() if other == hostname)
    if hostname and twins:
        problems.append(
            Problem(
                found=f"hostname {hostname!r}, the same as {', '.join(twins)}",
                planned="a hostname of its own",
                remedy="`sudo hostnamectl set-hostname <unique name>` and update /etc/hosts",
            )
        )
    return problems
