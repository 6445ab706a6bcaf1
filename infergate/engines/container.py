"""The engine's container on one node, a `ContainerSpec` built from the plan: typed arguments
for the Docker Engine API (`create_kwargs`), the same for the launch and the in-image probe.

The probe differs from the launch only in its command, name and labels, so that it proves
what the launch will run. The plan's env, secrets and all, travels in the create request's
body, never on a command line (docs/internals.md#engine-container).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from docker.types import Ulimit

from infergate.plan.docker_args import gpu_request, merged, parse_docker_args
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
