"""`docker run` command lines for the nodes' shells, shared by the in-image probe and deploy.

Both run the engine's container from one `ContainerSpec`, built from the plan and the node:
the probe proves what the launch will run, so it may differ only in its command and its own
options (name, labels, `-d` or `--rm`). A probe without the launch's RDMA devices would
see NCCL fall back to sockets and fail a correct plan's NET/IB check.

The plan's env may hold secrets (HF_TOKEN, VLLM_API_KEY): it never goes on a command line,
where `ps` on the node, and the ssh argv on the controller, would show it. `docker run`
reads it with `--env-file /dev/stdin` from the command's standard input, which the caller
sends over SSH (`ContainerSpec.env_file`): no file on the node, no value in any argv.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from infergate.inventory import Inventory, Node

# Ray's memory monitor kills workers once host memory is nearly full, and on GB10's unified
# memory the weights and the KV cache are host memory: the Spark playbook's run_cluster.sh
# sets it on both nodes (NVIDIA/dgx-spark-playbooks nvidia/vllm/README.md). Under the plan's
# engine.env, so a plan can still set it.
ENGINE_ENV: dict[str, dict[str, str]] = {"vllm-ray": {"RAY_memory_monitor_refresh_ms": "0"}}
ENV_FROM_STDIN = ("--env-file", "/dev/stdin")


@dataclass(frozen=True)
class ContainerSpec:
    """The engine's container on one node, as the launch and the preflight probe run it."""

    image: str  # the image ID where it is known, else the plan's ref
    gpus: bool
    rdma: bool  # the plan names HCAs on this node
    mounts: tuple[str, ...]  # read-only, each at its own path
    env: tuple[tuple[str, str], ...] = field(repr=False)  # may hold secrets
    docker_args: tuple[str, ...]  # engine.docker_args, last: the plan has the final word

    def options(self) -> list[str]:
        """`docker run` options. Never pull: a preflight that pulls a missing `image.ref`
        may fetch someone else's image of that name and run it with host networking and
        the plan's env; a missing image is the image check's finding instead."""
        options = ["--pull=never", "--network", "host", "--ipc", "host"]
        options += ["--gpus", "all"] if self.gpus else []
        if self.rdma:  # RDMA verbs need the devices and unlimited locked memory
            options += ["--device", "/dev/infiniband", "--ulimit", "memlock=-1"]
        for mount in self.mounts:
            options += ["-v", f"{mount}:{mount}:ro"]
        options += ENV_FROM_STDIN if self.env else []
        return [*options, *self.docker_args]

    def env_file(self) -> str:
        """The env as `docker run --env-file` reads it, one `KEY=VALUE` a line: the standard
        input of the command that runs this container."""
        for key, value in self.env:
            if "\n" in value or "\r" in value:  # the file has one variable a line
                raise ValueError(f"the value of {key} in the plan's env has a line break")
        return "".join(f"{key}={value}\n" for key, value in self.env)


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


def run_keeping_ngc_entrypoint(
    spec: ContainerSpec, own: Sequence[str], command: Sequence[str]
) -> str:
    """A shell command that runs COMMAND in SPEC's container, keeping an NGC entrypoint
    (it sets up CUDA compatibility and prints its banner) and clearing any other (vLLM's
    own image starts a server with whatever follows it)."""
    inspect = (
        f"docker image inspect --format '{{{{json .Config.Entrypoint}}}}' {shlex.quote(spec.image)}"
    )
    choice = keep_ngc_entrypoint(f'"$({inspect} 2>/dev/null)"')
    return f"{choice}\n{docker_run(spec, own, command)}"


def keep_ngc_entrypoint(entrypoint: str) -> str:
    """A shell `case` that sets $ep for docker_run from ENTRYPOINT, a shell word that holds
    the image's `json .Config.Entrypoint`: empty for NGC's entrypoint or none, otherwise
    `--entrypoint=` to clear it."""
    return f'case {entrypoint} in *nvidia_entrypoint*|null|"") ep= ;; *) ep=--entrypoint= ;; esac'


def docker_run(spec: ContainerSpec, own: Sequence[str], command: Sequence[str]) -> str:
    """`docker run` of COMMAND in SPEC's container, with OWN options (name, labels, `-d` or
    `--rm`) first and the entrypoint keep_ngc_entrypoint chose."""
    options = shlex.join([*own, *spec.options()])
    return f"docker run {options} $ep {shlex.quote(spec.image)} {shlex.join(command)}"


def remove_labelled(label: str, stop_grace_s: int | None = None) -> str:
    """A shell command that removes the containers carrying LABEL (key=value), and only
    those; with STOP_GRACE_S, SIGTERM first and SIGKILL after that many seconds."""
    stop = f"docker stop -t {stop_grace_s} $ids >/dev/null; " if stop_grace_s is not None else ""
    found = f"docker ps -aq --filter label={shlex.quote(label)}"
    return f'ids=$({found}); [ -z "$ids" ] || {{ {stop}docker rm -f $ids >/dev/null; }}'
