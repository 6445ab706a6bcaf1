"""Where the engine writes on a node, and the file system each of those places is on: the
Docker root, the model directory, and the compile/JIT caches that `engine.docker_args` maps
onto the host. One probe section asks `findmnt` about each (docs/checks.md#disk-space).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infergate.plan.docker_args import Volume, parse_docker_args, volume

# the engine images run as root: `~` in the container unless the plan's env sets HOME
ROOT_HOME = "/root"

# The compile/JIT caches by the env name that moves each, with its documented default (`~`:
# the container's home); the list and the defaults' sources: docs/checks.md#disk-space
CACHE_DEFAULTS: dict[str, str | None] = {
    "HF_HOME": "{xdg}/huggingface",
    "VLLM_CACHE_ROOT": "{xdg}/vllm",
    "TRITON_CACHE_DIR": "~/.triton/cache",
    "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_root",
    "TORCH_EXTENSIONS_DIR": None,
    "DG_JIT_CACHE_DIR": None,
    "TILELANG_CACHE_DIR": None,
    "FLASHINFER_WORKSPACE_BASE": None,
}

# the disk section's lines that name the Docker root and the planned image's size (bytes)
DOCKER_ROOT = "docker-root"
IMAGE_SIZE = "image-size"


def volumes_of(docker_args: Sequence[str]) -> list[Volume]:
    """The `-v SRC:DST[:OPTS]` of engine.docker_args."""
    return [volume(spec) for spec in parse_docker_args(docker_args).get("volumes", [])]


@dataclass(frozen=True)
class ContainerPlan:
    """The engine container's env, as the launch builds it, and its volumes."""

    env: dict[str, str]
    volumes: list[Volume]


def container_plan(node_env: Mapping[str, str], docker_args: Sequence[str]) -> ContainerPlan:
    """The env (the plan's for the node, then docker_args' `-e`) and volumes of the engine's
    container on a node."""
    env = {**node_env, **parse_docker_args(docker_args).get("environment", {})}
    return ContainerPlan(env, volumes_of(docker_args))


def written_paths(plan: ContainerPlan, model_path: str) -> list[str]:
    """The host paths the disk section asks about: every cache a volume maps, every writable
    volume's source, and the model directory."""
    mapped = (host_path(p, plan.volumes) for p in cache_dirs(plan.env).values())
    sources = (v.source for v in plan.volumes if v.source.startswith("/") and not v.read_only)
    return list(dict.fromkeys([*(p for p in mapped if p), *sources, model_path]))


def cache_dirs(env: Mapping[str, str]) -> dict[str, str]:
    """Each cache's path in the container: the env's value, else the engine's default."""
    home = env.get("HOME", ROOT_HOME)
    xdg = env.get("XDG_CACHE_HOME", f"{home}/.cache")
    found = {}
    for name, default in CACHE_DEFAULTS.items():
        path = env.get(name) or (default and default.format(xdg=xdg))
        if path:
            found[name] = posixpath.normpath(home + path[1:] if path.startswith("~") else path)
    return found


def host_path(container_path: str, volumes: Sequence[Volume]) -> str | None:
    """Where a container path lies on the host: under the bind mount that holds it (the
    deepest), or None: in the container's own layer (or a named volume), under the Docker root."""
    holding = [
        v
        for v in volumes
        if container_path == v.target or container_path.startswith(v.target.rstrip("/") + "/")
    ]
    if not holding:
        return None
    deepest = max(holding, key=lambda v: len(v.target))
    if not deepest.source.startswith("/"):
        return None
    rest = container_path[len(deepest.target.rstrip("/")) :]
    return posixpath.normpath(deepest.source + rest)


def disk_section(image_ref: str, paths: Sequence[str]) -> tuple[str, str]:
    """The probe section: the Docker root (`docker info`) and the image's size, then `findmnt`
    of the Docker root and of each path, from its nearest existing ancestor (a cache not made
    yet is made there), one `PATH<TAB>findmnt line` each."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    script = (
        "root=$(docker info --format '{{.DockerRootDir}}' 2>/dev/null)\n"
        f'printf "{DOCKER_ROOT}\\t%s\\n" "$root"\n'
        f'printf "{IMAGE_SIZE}\\t%s\\n" "$(docker image inspect --format '
        f"'{{{{.Size}}}}' {shlex.quote(image_ref)} 2>/dev/null)\"\n"
        f'for p in "$root" {quoted}; do\n'
        '  [ -n "$p" ] || continue; q=$p\n'
        '  while [ ! -e "$q" ]; do q=$(dirname "$q"); done\n'
        '  printf "%s\\t%s\\n" "$p" "$(findmnt -r -n -b -o FSTYPE,SOURCE,AVAIL,SIZE,TARGET'
        ' -T "$q" | tail -n 1)"\n'
        "done"
    )
    return ("disk", script)


@dataclass(frozen=True)
class Mount:
    """A file system: `avail` is the bytes free to an unprivileged writer, `target` its mount
    point (both None in the two-column form)."""

    fstype: str
    source: str
    avail: int | None
    target: str | None


_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def parse_findmnt_raw(line: str) -> Mount:
    """Parse one line of `findmnt -r -n -b -o FSTYPE,SOURCE,AVAIL,SIZE,TARGET -T PATH`
    (`-r` hex-escapes blanks, so fields split on whitespace), or of its first two columns
    (`findmnt -n -o FSTYPE,SOURCE -T /`). Recorded on a 2xH200 host:
    ``ext4 /dev/vda 68697530368 270553174016 /``. ValueError on anything else."""
    words = [_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), w) for w in line.split()]
    if len(words) not in (2, 5) or (len(words) == 5 and not words[2].isdigit()):
        raise ValueError(f"not a findmnt line: {line!r}")
    if len(words) == 2:
        return Mount(words[0], words[1], None, None)
    return Mount(words[0], words[1], int(words[2]), words[4])


@dataclass(frozen=True)
class DiskFacts:
    """The Docker root (None: no engine answered `docker info`), the planned image's size (None
    where it is not on the node), and the file system each path is on."""

    docker_root: str | None
    image_bytes: int | None
    mounts: dict[str, Mount]


def parse_disk_section(text: str) -> DiskFacts:
    """Parse the disk section (see disk_section): ``docker-root<TAB>/var/lib/docker``, then
    ``/var/lib/docker<TAB>ext4 /dev/vda 68697530368 270553174016 /`` per path."""
    root, size, mounts = None, None, {}
    for line in text.splitlines():
        path, _, rest = line.partition("\t")
        if path == DOCKER_ROOT:
            root = rest.strip() or None
        elif path == IMAGE_SIZE:
            size = int(rest) if rest.strip().isdigit() else None
        elif path:
            mounts[path] = parse_findmnt_raw(rest)
    return DiskFacts(root, size, mounts)
