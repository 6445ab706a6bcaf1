"""The engine's container, one `ContainerSpec` built from the plan and the node, for the
in-image probe and deploy: typed arguments for the Docker Engine API (`create_kwargs`, sent
by infergate.docker_api). The module keeps its name from the days of `docker run` command
lines: the plan still speaks the CLI's options (engine.docker_args), translated here.

The probe proves what the launch will run, so it may differ only in its command and its own
options (name, labels). A probe without the launch's RDMA devices would see NCCL fall back to
sockets and fail a correct plan's NET/IB check.

The plan's env may hold secrets (HF_TOKEN, VLLM_API_KEY): it never goes on a command line,
where `ps` on the node, and the ssh argv on the controller, would show it. It is a field of
the create request's body, sent over the forwarded socket: no file on the node, no value in
any argv, and a value may hold any character (there is no env file whose lines it could
break).

`engine.docker_args` is written as docker CLI options (the plan's operators know them); the
options real plans use are translated into typed arguments here (`parse_docker_args`), and
any other is refused by name rather than passed on unread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from docker.types import DeviceRequest, Ulimit

from infergate.inventory import Inventory, Node

# Ray's memory monitor kills workers once host memory is nearly full, and on GB10's unified
# memory the weights and the KV cache are host memory: the Spark playbook's run_cluster.sh
# sets it on both nodes (NVIDIA/dgx-spark-playbooks nvidia/vllm/README.md). Under the plan's
# engine.env, so a plan can still set it.
ENGINE_ENV: dict[str, dict[str, str]] = {"vllm-ray": {"RAY_memory_monitor_refresh_ms": "0"}}


@dataclass(frozen=True)
class ContainerSpec:
    """The engine's container on one node, as the launch and the preflight probe run it."""

    image: str  # the image ID where it is known, else the plan's ref
    gpus: bool
    rdma: bool  # the plan names HCAs on this node
    mounts: tuple[str, ...]  # read-only, each at its own path
    env: tuple[tuple[str, str], ...] = field(repr=False)  # may hold secrets
    docker_args: tuple[str, ...]  # engine.docker_args, last: the plan has the final word

    def create_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `client.containers.create(image, command, **kwargs)`: host
        network and IPC, the GPUs, the HCAs with unlimited locked memory (RDMA verbs need
        both), each mount read-only at its own path, the env; engine.docker_args merged last
        (the plan has the final word). Create, then start: never `containers.run`, which
        pulls an image it does not find. A preflight that pulls a missing `image.ref` may
        fetch someone else's image of that name and run it with host networking and the
        plan's env; a missing image is the image check's finding instead."""
        kwargs: dict[str, Any] = {"network_mode": "host", "ipc_mode": "host"}
        if self.gpus:
            kwargs["device_requests"] = [_gpus("all")]
        if self.rdma:
            kwargs["devices"] = ["/dev/infiniband"]
            kwargs["ulimits"] = [Ulimit(name="memlock", soft=-1, hard=-1)]
        kwargs["volumes"] = [f"{mount}:{mount}:ro" for mount in self.mounts]
        kwargs["environment"] = dict(self.env)
        return _merged(kwargs, parse_docker_args(self.docker_args))


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


def _gpus(value: str) -> DeviceRequest:
    """`--gpus all`, `--gpus 2`, `--gpus device=0,1` (also quoted, as the CLI's docs write)."""
    value = value.strip("\"'")
    if value == "all":
        return DeviceRequest(count=-1, capabilities=[["gpu"]])
    if value.isdigit():
        return DeviceRequest(count=int(value), capabilities=[["gpu"]])
    if value.startswith("device="):
        ids = value.removeprefix("device=").split(",")
        return DeviceRequest(device_ids=ids, capabilities=[["gpu"]])
    raise DockerArgsError(f"--gpus {value}: all, a count, or device=ID[,ID...]")


def _int(option: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        if not value.lstrip("-").isdigit():
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
    "--gpus": ("device_requests", _gpus, "list"),
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


def parse_docker_args(args: Sequence[str]) -> dict[str, Any]:
    """engine.docker_args, docker CLI options (`--opt value` or `--opt=value`), as typed
    keyword arguments of `containers.create`. DockerArgsError names an option it does not
    know (passing it on unread would launch a container the plan did not ask for) or a
    value it cannot read."""
    found: dict[str, Any] = {}
    words = list(args)
    while words:
        word = words.pop(0)
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        name = ALIASES.get(name, name)
        if name not in DOCKER_ARGS:
            raise DockerArgsError(
                f"engine.docker_args: {word} cannot be given through the Docker API; "
                f"these can: {', '.join(sorted(DOCKER_ARGS))} (and {', '.join(sorted(ALIASES))})"
            )
        key, parse, combine = DOCKER_ARGS[name]
        if parse is None:
            found[key] = value.lower() != "false" if eq else True
            continue
        if not eq:
            if not words:
                raise DockerArgsError(f"engine.docker_args: {word} needs a value after it")
            value = words.pop(0)
        try:
            parsed = parse(value)
        except DockerArgsError as e:
            raise DockerArgsError(f"engine.docker_args: {e}") from None
        found = _merged(found, {key: [parsed] if combine == "list" else parsed})
    return found


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
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


def clears_entrypoint(entrypoint: Sequence[str] | None) -> bool:
    """Whether the container clears the image's ENTRYPOINT (its `Config.Entrypoint`, as the
    API's image inspection gives it): NGC's (it sets up CUDA compatibility and prints its
    banner) is kept, and so is none; any other is cleared (vLLM's own image starts a server
    with whatever follows it)."""
    return bool(entrypoint) and not any("nvidia_entrypoint" in word for word in entrypoint or ())


def engine_container(inventory: Inventory, node: Node) -> ContainerSpec:
    """NODE's engine container: host network and IPC (the ranks talk over the fabric and
    shared memory), its GPUs and the plan's HCAs, the model read-only at its planned path,
    the plan's env for this node, engine.docker_args; the plan's image ID where it has one."""
    env = {**ENGINE_ENV.get(inventory.engine.kind, {}), **inventory.node_env(node)}
    return ContainerSpec(
        image=inventory.image.id or inventory.image.ref,
        gpus=node.gpus > 0,
        rdma=bool(node.fabric.hcas),
        mounts=(inventory.model.path,),
        env=tuple(sorted(env.items())),
        docker_args=tuple(inventory.engine.docker_args),
    )
