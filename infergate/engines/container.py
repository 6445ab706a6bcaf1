"""The engine's container, one `ContainerSpec` built from the plan and the node, for the
in-image probe and deploy: typed arguments for the Docker Engine API (`create_kwargs`, sent
by infergate.remote.docker_api). The module keeps its name from the days of `docker run` command
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
options real plans use are translated into typed arguments by infergate.plan.docker_args, and any
other is refused by name, when the plan is read, rather than passed on unread.
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
        network and IPC, the GPUs, the HCAs with unlimited locked memory (RDMA verbs need
        both), each mount read-only at its own path, the env; engine.docker_args merged last
        (the plan has the final word). Create, then start: never `containers.run`, which
        pulls an image it does not find. A preflight that pulls a missing `image.ref` may
        fetch someone else's image of that name and run it with host networking and the
        plan's env; a missing image is the image check's finding instead."""
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
    """Whether the container clears the image's ENTRYPOINT (its `Config.Entrypoint`, as the
    API's image inspection gives it): NGC's (it sets up CUDA compatibility and prints its
    banner) is kept, and so is none; any other is cleared (vLLM's own image starts a server
    with whatever follows it)."""
    return bool(entrypoint) and not any("nvidia_entrypoint" in word for word in entrypoint or ())


def engine_container(
    inventory: Inventory, node: Node, engine_env: Mapping[str, str]
) -> ContainerSpec:
    """NODE's engine container: host network and IPC (the ranks talk over the fabric and
    shared memory), its GPUs and the plan's HCAs, the model read-only at its planned path,
    the engine's own ENGINE_ENV under the plan's env for this node, engine.docker_args; the
    plan's image ID where it has one."""
    env = {**engine_env, **inventory.node_env(node)}
    return ContainerSpec(
        image=inventory.image.id or inventory.image.ref,
        gpus=node.gpus > 0,
        rdma=bool(node.fabric.hcas),
        mounts=(inventory.model.path,),
        env=tuple(sorted(env.items())),
        docker_args=tuple(inventory.engine.docker_args),
    )
