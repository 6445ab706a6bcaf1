"""What the engine's own container gives it, read by the in-image probe in a container built
like the launch's (engine.docker_args included): open files, locked memory, writable caches;
and the chat template the image's transformers renders (docs/checks.md#launch-container).
"""

from __future__ import annotations

from typing import Any

from infergate.plan.model import MAX_IN_FLIGHT, Inference, plan_key
from infergate.problems import Problem

FLOOR_KEY = plan_key("thresholds.min_open_files")
# the soft limit the engines set themselves, within the hard one (vllm/utils/system_utils.py)
ENGINE_RAISES_TO = 65535
# a request's socket, its stream and the engine's own per request
FDS_PER_REQUEST = 4
# RLIM_INFINITY, as Python's resource module reports it
UNLIMITED = -1


def _effective(soft: int, hard: int) -> int:
    """The open-files limit the engine runs with once it raised its soft limit."""
    if soft == UNLIMITED:
        return UNLIMITED
    ceiling = ENGINE_RAISES_TO if hard == UNLIMITED else min(hard, ENGINE_RAISES_TO)
    return max(soft, ceiling)


def most_in_flight(inference: Inference) -> int:
    """The most requests the plan's load can hold open at once: the highest closed-loop
    concurrency, or MAX_IN_FLIGHT where the plan has an open-loop level, whose arrivals pile up to
    the client's cap once the engine falls behind (docs/checks.md#launch-container)."""
    open_loop = MAX_IN_FLIGHT if inference.request_rates else 0
    return max(max(inference.concurrency, default=1), open_loop)


def check_open_files(container: dict[str, Any], in_flight: int, floor: float) -> list[Problem]:
    """The container's open-files limit, as the engine raises it, covers the planned load:
    at least max(FLOOR (thresholds.min_open_files, 65536 by default), 4 x the most requests
    in flight, most_in_flight)."""
    if "error" in container:
        return [_unread(container)]
    soft, hard = container["limits"]["nofile"]
    needed = max(int(floor), FDS_PER_REQUEST * in_flight)
    got = _effective(soft, hard)
    # the engines' own 65535 meets the 65536 floor
    if got == UNLIMITED or got + 1 >= needed:
        return []
    value = max(needed, 1048576)
    return [
        Problem(
            found=f"open files {soft} soft, {hard} hard in the launch's container (the engine "
            f"raises its soft limit to at most {got})",
            planned=f"at least {needed} ({FLOOR_KEY} {floor:g}, or {FDS_PER_REQUEST} x "
            f"{in_flight} requests in flight: the highest inference.concurrency, or "
            f"{MAX_IN_FLIGHT} where inference.request_rates plans an open-loop level)",
            remedy=f"add `--ulimit nofile={value}:{value}` to engine.docker_args, or remove "
            "the --ulimit nofile there that lowers it (dockerd's default-ulimits in "
            "/etc/docker/daemon.json sets it for every container)",
        )
    ]


def check_locked_memory(container: dict[str, Any]) -> list[Problem]:
    """Where the plan names HCAs: locked memory unlimited in the launch's container (RDMA
    verbs pin NCCL's buffers; a bounded memlock fails ibv_reg_mr and NCCL falls back to
    sockets or aborts)."""
    if "error" in container:
        return [_unread(container)]
    soft, hard = container["limits"]["memlock"]
    if soft == UNLIMITED:
        return []
    return [
        Problem(
            found=f"locked memory {_kib(soft)} soft, {_kib(hard)} hard in the launch's container",
            planned="unlimited (the plan names HCAs: nodes[].fabric.hcas)",
            remedy="remove the `--ulimit memlock=...` in engine.docker_args that bounds it, or "
            "set `--ulimit memlock=-1:-1` there",
        )
    ]


def check_caches_writable(container: dict[str, Any]) -> list[Problem]:
    """The engine's cache directories (HF_HOME, VLLM_CACHE_ROOT, TRITON_CACHE_DIR,
    ~/.cache) are writable by the container's user: vLLM's torch.compile and Triton write
    their kernels there at start-up and fail with PermissionError (or EROFS) otherwise."""
    if "error" in container:
        return [_unread(container)]
    user = container.get("user", {})
    who = f"uid {user.get('uid')} (HOME {user.get('home')})"
    problems = []
    for name, cache in container.get("caches", {}).items():
        if cache["writable"]:
            continue
        where = cache["path"]
        variable = "XDG_CACHE_HOME" if name == "~/.cache" else name
        tried = (
            "" if cache["tried"] == where else f" (its nearest existing parent {cache['tried']})"
        )
        problems.append(
            Problem(
                found=f"{name} {where} not writable by {who}{tried}",
                planned="every engine cache directory writable by the container's user",
                remedy=f"set {variable} in engine.env to a directory that user can write (a "
                "volume `-v HOSTDIR:DIR` in engine.docker_args, HOSTDIR owned by that uid), or "
                "run the container as the directory's owner (engine.docker_args `--user`)",
            )
        )
    return problems


def check_chat_template(template: dict[str, Any]) -> list[Problem]:
    """The model has a chat template, or the plan passes one, and the image's transformers
    renders a message with it: without one, /v1/completions works and every
    /v1/chat/completions answers 400."""
    source = template.get("source", "the model's tokenizer")
    if template.get("template") and "error" not in template:
        return []
    if "error" in template:
        error = str(template["error"]).splitlines()[0][:300]
        found = (
            f"the chat template of {source} does not render with the image's transformers: {error}"
        )
        remedy = (
            "fix the template (the error names the line), or pass a working one with "
            "`--chat-template FILE` in engine.flags (FILE inside the container)"
        )
    else:
        found = (
            "no chat template: neither tokenizer_config.json's chat_template nor "
            "chat_template.jinja in the model directory, and no --chat-template"
        )
        remedy = (
            "copy the model's chat_template.jinja (or tokenizer_config.json) from its "
            "source onto this node, or add `--chat-template FILE` to engine.flags"
        )
    planned = "a chat template that renders one user message"
    return [Problem(found=found, planned=planned, remedy=remedy)]


def _unread(container: dict[str, Any]) -> Problem:
    return Problem(
        found=f"the probe could not read the container's facts: {str(container['error'])[:300]}",
        planned="the launch container's limits and caches read in the image",
        remedy="run `python3 -c 'import resource, os'` in the image: it needs a python3",
    )


def _kib(value: int) -> str:
    return "unlimited" if value == UNLIMITED else f"{value // 1024} KiB"
