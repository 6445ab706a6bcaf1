"""engine.docker_args, the docker CLI options a plan adds to the engine's containers, read as
typed arguments of the Engine API's `containers.create`: an option the API cannot be given
is a usage error naming the key, before any node is touched.

Option names and value forms as the docker CLI documents them:
https://docs.docker.com/reference/cli/docker/container/run/
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from docker.types import DeviceRequest, Ulimit

from infergate.plan.values import WHOLE_NUMBER


class DockerArgsError(ValueError):
    """engine.docker_args holds an option the Docker API cannot be given, or a bad value."""


def _env(value: str) -> dict[str, str]:
    key, eq, val = value.partition("=")
    if not eq:  # `-e KEY` copies the caller's variable: the controller's, not the node's
        raise DockerArgsError(f"-e {value}: give the value in the plan (engine.env), not -e KEY")
    return {key: val}


def _ulimit(value: str) -> Ulimit:
    name, _, limits = value.partition("=")
    soft, _, hard = limits.partition(":")
    try:
        return Ulimit(name=name, soft=int(soft), hard=int(hard or soft))
    except ValueError:
        raise DockerArgsError(f"--ulimit {value}: NAME=SOFT[:HARD], e.g. memlock=-1") from None


def gpu_request(value: str) -> DeviceRequest:
    """`--gpus all`, `--gpus 2`, `--gpus device=0,1` (also quoted, as the CLI's docs write)."""
    value = value.strip("\"'")
    if value == "all":
        return DeviceRequest(count=-1, capabilities=[["gpu"]])
    if WHOLE_NUMBER.fullmatch(value):
        return DeviceRequest(count=int(value), capabilities=[["gpu"]])
    if value.startswith("device="):
        ids = value.removeprefix("device=").split(",")
        return DeviceRequest(device_ids=ids, capabilities=[["gpu"]])
    raise DockerArgsError(f"--gpus {value}: all, a count, or device=ID[,ID...]")


@dataclass(frozen=True)
class Volume:
    """A `-v` of engine.docker_args: its `source` a host path, or a named volume (no leading /),
    its `target` the path in the container."""

    source: str
    target: str
    read_only: bool


def volume(spec: str) -> Volume:
    """`-v SRC:DST[:OPTS]` (a bare `-v DST` is an anonymous volume, under the Docker root like
    a named one)."""
    parts = spec.split(":")
    source, target = (parts[0], parts[1]) if len(parts) > 1 else ("", parts[0])
    options = parts[2].split(",") if len(parts) > 2 else []
    return Volume(source, target, "ro" in options)


def _int(option: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        if not WHOLE_NUMBER.fullmatch(value.removeprefix("-")):
            raise DockerArgsError(f"{option} {value}: a whole number")
        return int(value)

    return parse


def _same(value: str) -> str:
    return value


# option -> (create() keyword, parser of its value, how repeats combine: "list" appends,
# "dict" updates, "set" replaces); a flag (no value) has parser None
_Option = tuple[str, Callable[[str], Any] | None, str]
DOCKER_ARGS: dict[str, _Option] = {
    "--shm-size": ("shm_size", _same, "set"),
    "--env": ("environment", _env, "dict"),
    "--volume": ("volumes", _same, "list"),
    "--ulimit": ("ulimits", _ulimit, "list"),
    "--device": ("devices", _same, "list"),
    "--cap-add": ("cap_add", _same, "list"),
    "--security-opt": ("security_opt", _same, "list"),
    "--privileged": ("privileged", None, "set"),
    "--gpus": ("device_requests", gpu_request, "list"),
    "--runtime": ("runtime", _same, "set"),
    "--user": ("user", _same, "set"),
    "--entrypoint": ("entrypoint", lambda v: [v] if v else [], "set"),
    "--ipc": ("ipc_mode", _same, "set"),
    "--network": ("network_mode", _same, "set"),
    "--pids-limit": ("pids_limit", _int("--pids-limit"), "set"),
    "--memory": ("mem_limit", _same, "set"),
    "--group-add": ("group_add", _same, "list"),
    "--cpuset-cpus": ("cpuset_cpus", _same, "set"),
}
ALIASES = {"-e": "--env", "-v": "--volume", "-u": "--user", "-m": "--memory", "--net": "--network"}


def docker_options(args: Sequence[str]) -> Iterator[tuple[int, str, str | None]]:
    """Each option of engine.docker_args (`--opt value` or `--opt=value`): its index in ARGS,
    its long name, its value (None: a flag given bare); DockerArgsError names an option it
    does not know (passed on unread, it would launch a container the plan did not ask for)."""
    index = 0
    while index < len(args):
        start, word = index, args[index]
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        name = ALIASES.get(name, name)
        if name not in DOCKER_ARGS:
            shown = word.partition("=")[0] + ("=..." if "=" in word else "")  # `-eHF_TOKEN=T`
            raise DockerArgsError(
                f"engine.docker_args: {shown} cannot be given through the Docker API; "
                f"these can: {', '.join(sorted(DOCKER_ARGS))} (and {', '.join(sorted(ALIASES))})"
            )
        takes_value = DOCKER_ARGS[name][1] is not None
        if takes_value and not eq:
            if index + 1 == len(args):
                raise DockerArgsError(f"engine.docker_args: {word} needs a value after it")
            index += 1
            value = args[index]
        yield start, name, value if eq or takes_value else None
        index += 1


def parse_docker_args(args: Sequence[str]) -> dict[str, Any]:
    """engine.docker_args as typed keyword arguments of `containers.create`; DockerArgsError
    names an option it does not know or a value it cannot read."""
    found: dict[str, Any] = {}
    for _, name, value in docker_options(args):
        key, parse, combine = DOCKER_ARGS[name]
        if parse is None:
            found[key] = flag_on(value)
            continue
        try:
            parsed = parse(value or "")
        except DockerArgsError as e:
            raise DockerArgsError(f"engine.docker_args: {e}") from None
        found = merged(found, {key: [parsed] if combine == "list" else parsed})
    return found


def flag_on(value: str | None) -> bool:
    """A flag of docker_args, bare (`--privileged`) or with a value (`--privileged=false`)."""
    return value is None or value.lower() != "false"


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """OVER on BASE: lists appended (a ulimit of the same name replaced, the GPUs asked for
    replaced whole), dicts updated, any other value replaced."""
    merged = dict(base)
    for key, value in over.items():
        if key == "device_requests" and base is not over:
            merged[key] = value
        elif isinstance(value, list) and key == "ulimits":
            names = {u.name for u in value}
            merged[key] = [u for u in base.get(key, []) if u.name not in names] + value
        elif isinstance(value, list):
            merged[key] = [*base.get(key, []), *value]
        elif isinstance(value, dict):
            merged[key] = {**base.get(key, {}), **value}
        else:
            merged[key] = value
    return merged
