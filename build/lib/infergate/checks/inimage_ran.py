"""Whether the in-image probe ran on a node, and when it did not, why: that cause alone.

No Docker engine, or no image to run, is the host checks' finding (check_docker_engine,
check_image_parity), repeated word for word instead of judging sections never printed; a
probe container that died says its exit code and what it printed.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from infergate.checks.cuda import CudaInit, parse_cuda_init
from infergate.checks.host import DockerEngine, check_docker_engine
from infergate.checks.image import check_image_parity
from infergate.checks.nccl import remedy_for
from infergate.checks.probe import Section
from infergate.plan.model import Inventory
from infergate.problems import Problem

# printed by the node's shell, not by the probe
NOT_PROBE_OUTPUT = ("facts-cache",)


def image_to_run(inventory: Inventory, ids: dict[str, str | None]) -> str | None:
    """The image ID every node runs: the plan's, else the head's as its host probe read it;
    None when neither is known (then the ref, never pulled)."""
    return inventory.image.id or ids.get(inventory.head.name)


def probe_blockers(
    inventory: Inventory, engines: dict[str, DockerEngine], ids: dict[str, str | None]
) -> dict[str, list[Problem]]:
    """Why the probe container cannot start on each node of ENGINES: no Docker engine
    answers, or the image to run is not there (the image check's problem, with its copy
    command). A node with neither has an empty list."""
    parity = check_image_parity(
        inventory.image.ref, ids, inventory.nodes, image_to_run(inventory, ids)
    )
    return {
        node.name: check_docker_engine(engines[node.name]) or parity.get(node.name, [])
        for node in inventory.nodes
        if node.name in engines
    }


def check_probe_ran(sections: dict[str, Section], rc: int, said: str, image: str) -> list[Problem]:
    """The probe printed its sections; otherwise its container's exit code and stderr."""
    if any(name not in NOT_PROBE_OUTPUT for name in sections):
        return []
    run = shlex.join(
        ["docker", "run", "--rm", "--pull=never", "--entrypoint=", image, "python3", "-V"]
    )
    return [
        Problem(
            found=f"the probe container exited {rc} before the probe printed anything: "
            f"{said.strip()[-400:] or '(no output)'}",
            planned="the engine's container (its options as the launch gives them) running "
            "python3 in the planned image",
            remedy=f"run `{run}` on the node with engine.docker_args added: the error names "
            "the option, runtime or program at fault",
        )
    ]


def check_nccl_ran(result: dict[str, Any]) -> list[Problem]:
    """The rendezvous got as far as NCCL: a Gloo failure, or a container without a CUDA
    device, leaves no NCCL log to read transports from."""
    if "nccl_allreduce" in result:
        return []
    if "error" in result:
        said = str(result["error"])
        return [
            Problem(
                found=f"no NCCL all-reduce: the rendezvous before it failed: {said[:300]}",
                planned="an NCCL all-reduce across every node after the Gloo rendezvous",
                remedy=remedy_for([said, *str(result.get("trace", "")).splitlines()]),
            )
        ]
    return [
        Problem(
            found="no NCCL all-reduce: torch in the probe container saw no CUDA device",
            planned="the node's GPUs in the engine's container (--gpus all)",
            remedy="check the NVIDIA Container Toolkit on the node: "
            "`docker run --rm --gpus all IMAGE nvidia-smi` must list the GPUs",
        )
    ]


def cuda_init_of(preamble: str, part: dict[str, Any]) -> CudaInit:
    """The CUDA init verdict from the image's banner and the probe's cuda-init section; where
    the section could not run its test (no libcuda.so.1 in the container), its own words."""
    init = parse_cuda_init(preamble + "\n" + str(part.get("text", "")))
    said = part.get("skipped") or part.get("error")
    if init.ok is None and said:
        return replace(init, evidence=f"the CUDA init probe did not run: {str(said)[:300]}")
    return init
