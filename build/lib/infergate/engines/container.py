"""The engine's container on one node, a `ContainerSpec` built from the plan: typed arguments
for the Docker Engine API (`create_kwargs`), the same for the launch and the in-image probe,
and what the plan grants it on the node beyond the gate's own options (`privileged_grants`).

The probe differs from the launch only in its command, name and labels, so that it proves
what the launch will run. The plan's env, secrets and all, travels in the create request's
body, never on a command line (docs/internals.md#engine-container).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from docker.types import Ulimit

from infergate.plan.docker_args import (
    docker_options,
    flag_on,
    gpu_request,
    merged,
    parse_docker_args,
    volume,
)
from infergate.plan.model import Inventory, Node


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
        network and IPC, the GPUs, the HCAs with unlimited locked memory, read-only mounts, the
        env, engine.docker_args last; never `containers.run` (docs/internals.md#no-pull)."""
        kwargs: dict[str, Any] = {"network_mode": "host", "ipc_mode": "host"}
        if self.gpus:
            kwargs["device_requests"] = [gpu_request("all")]
        if self.rdma:
            kwargs["devices"] = ["/dev/infiniband"]
            kwargs["ulimits"] = [Ulimit(name="memlock", soft=-1, hard=-1)]
        kwargs["volumes"] = [f"{mount}:{mount}:ro" for mount in self.mounts]
        kwargs["environment"] = dict(self.env)
        return merged(kwargs, parse_docker_args(self.docker_args))


def clears_entrypoint(entrypoint: Sequence[str] | None) -> bool:
    """Whether the container clears the image's ENTRYPOINT (`Config.Entrypoint`): NGC's, which
    sets up CUDA compatibility, is kept, and so is none; any other is cleared (vLLM's own image
    starts a server with whatever follows it)."""
    return bool(entrypoint) and not any("nvidia_entrypoint" in word for word in entrypoint or ())


def engine_container(
    inventory: Inventory, node: Node, engine_env: Mapping[str, str]
) -> ContainerSpec:
    """NODE's engine container: host network and IPC, its GPUs and HCAs, the model read-only
    at its path, ENGINE_ENV under the plan's env for this node, engine.docker_args; the plan's
    image ID where it has one."""
    env = {**engine_env, **inventory.node_env(node)}
    return ContainerSpec(
        image=inventory.image.id or inventory.image.ref,
        gpus=node.gpus > 0,
        rdma=bool(node.fabric.hcas),
        mounts=(inventory.model.path,),
        env=tuple(sorted(env.items())),
        docker_args=tuple(inventory.engine.docker_args),
    )


# what every engine container gets, whatever the plan says (create_kwargs)
GATE_OPTIONS = "host network and IPC, the GPUs and HCAs, the model read-only"
# host paths whose mount is root on the node, as is any folder above one (a mount of `/var`
# holds /var/lib/docker) and, but for the homes, anything below one (/etc/sudoers.d)
SYSTEM_PATHS = (
    *("/etc", "/root/.ssh", "/proc", "/sys", "/dev", "/boot", "/usr", "/bin", "/sbin", "/lib"),
    *("/lib64", "/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet", "/run/docker"),
    *("/run/containerd", "/var/run/docker", "/var/run/containerd"),
)
HOMES = ("/root", "/home")  # a folder below one is a user's data (the lab's model cache)
ENGINE_SOCKETS = ("docker.sock", "containerd.sock", "podman.sock", "crio.sock")
UNCONFINED = (
    "seccomp=unconfined",
    "apparmor=unconfined",
    "label=disable",
    "systempaths=unconfined",
)
_PATH = r"/[\w/.+@-]{0,200}"
GRANT_NAME = re.compile(
    rf"privileged|user:root|cap:\w{{1,40}}|device:{_PATH}|mount:{_PATH}|"
    rf"security-opt:({'|'.join(UNCONFINED)})"
)
GRANT_NAMES = (
    "privileged, cap:NAME, device:PATH, mount:PATH, user:root, "
    f"security-opt:{', security-opt:'.join(UNCONFINED)}"
)


@dataclass(frozen=True)
class Grant:
    """A privilege the plan gives its containers on every node, and the plan key that asks
    (docs/internals.md#privileged-grants)."""

    name: str  # as an allow-list names it: privileged, cap:SYS_ADMIN, mount:/dev/shm
    key: str  # engine.docker_args[3], model.path
    what: str  # what it gives the container on the node


def privileged_grants(inventory: Inventory) -> tuple[Grant, ...]:
    """What the plan grants its engine and probe containers beyond the gate's own options
    (host network and IPC, the GPUs and HCAs, the model read-only): privileged mode, added
    capabilities, devices, mounts of host system paths, confinement off, user root."""
    model = inventory.model.path
    found = [] if _safe_path(model) else [_mount(model, "model.path", read_only=True)]
    for index, name, value in docker_options(inventory.engine.docker_args):
        grant = _docker_arg_grant(name, value, f"engine.docker_args[{index}]")
        found += [grant] if grant else []
    return tuple(found)


def _docker_arg_grant(name: str, value: str | None, key: str) -> Grant | None:
    text = value or ""
    mount, unconfined = volume(text), text.replace(":", "=", 1)
    if name == "--privileged" and flag_on(value):
        return Grant("privileged", key, "every device and capability, no seccomp or AppArmor")
    if name == "--cap-add":
        cap = _cap(text)
        return Grant(
            cap, key, "every capability" if cap == "cap:ALL" else f"the capability {cap[4:]}"
        )
    if name == "--device":
        device = _normal(text.split(":")[0])
        return Grant(f"device:{device}", key, f"the node's device {device}")
    if name == "--volume" and mount.source.startswith("/") and not _safe_path(mount.source):
        return _mount(mount.source, key, mount.read_only)
    if name == "--security-opt" and unconfined in UNCONFINED:
        return Grant(f"security-opt:{unconfined}", key, "the container's confinement off")
    if name == "--user" and text.split(":")[0] in ("root", "0"):
        return Grant("user:root", key, "root in the container, asked for by name")
    return None


def _mount(path: str, key: str, read_only: bool) -> Grant:
    shown = _normal(path)
    if posixpath.basename(shown) in ENGINE_SOCKETS:
        what = "the node's container engine: any container, so root on the node"
    else:
        what = f"the node's {shown}, {'read-only' if read_only else 'writable'}"
    return Grant(f"mount:{shown}", key, what)


def _normal(path: str) -> str:
    """/var/run/docker.sock for //var/run/./docker.sock/ (the kernel resolves it the same)."""
    return "/" + posixpath.normpath(path).lstrip("/")


def _safe_path(path: str) -> bool:
    """Whether a host path, mounted, is no system path, no folder above one, no engine socket."""
    found = _normal(path)
    if posixpath.basename(found) in ENGINE_SOCKETS:
        return False
    if any(_within(found, system) or _within(system, found) for system in SYSTEM_PATHS):
        return False
    return not any(_within(home, found) for home in HOMES)


def _within(path: str, folder: str) -> bool:
    return folder == "/" or path == folder or path.startswith(folder + "/")


def _cap(name: str) -> str:
    """cap:SYS_ADMIN for sys_admin or CAP_SYS_ADMIN, as Docker reads them."""
    return "cap:" + name.upper().removeprefix("CAP_")


def allowed_grants(text: str) -> frozenset[str]:
    """An operator's allow-list: comma-separated grant names (privileged, cap:SYS_ADMIN,
    mount:/dev/shm); ValueError names an entry that is no grant."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if not GRANT_NAME.fullmatch(name):
            raise ValueError(f"{ascii(name)[:60]} is not a grant: write {GRANT_NAMES}")
    return frozenset(_allowed(n) for n in names)


def _allowed(name: str) -> str:
    kind, _, rest = name.partition(":")
    if kind == "cap":
        return _cap(rest)
    return f"{kind}:{_normal(rest)}" if kind in ("device", "mount") else name


def refused_grants(grants: Iterable[Grant], allowed: frozenset[str]) -> list[Grant]:
    """The GRANTS an operator's allow-list leaves out."""
    return [g for g in grants if g.name not in allowed]
