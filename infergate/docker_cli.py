"""`docker run` command lines for the nodes' shells, shared by the in-image probe and deploy."""

from __future__ import annotations

import shlex


def run_keeping_ngc_entrypoint(options: list[str], image: str, command: list[str]) -> str:
    """A shell command that runs COMMAND in IMAGE with OPTIONS, keeping an NGC entrypoint
    (it sets up CUDA compatibility and prints its banner) and clearing any other (vLLM's
    own image starts a server with whatever follows it)."""
    inspect = (
        f"docker image inspect --format '{{{{json .Config.Entrypoint}}}}' {shlex.quote(image)}"
    )
    choice = keep_ngc_entrypoint(f'"$({inspect} 2>/dev/null)"')
    return f"{choice}\n{docker_run(options, image, command)}"


def keep_ngc_entrypoint(entrypoint: str) -> str:
    """A shell `case` that sets $ep for docker_run from ENTRYPOINT, a shell word that holds
    the image's `json .Config.Entrypoint`: empty for NGC's entrypoint or none, otherwise
    `--entrypoint=` to clear it."""
    return f'case {entrypoint} in *nvidia_entrypoint*|null|"") ep= ;; *) ep=--entrypoint= ;; esac'


def docker_run(options: list[str], image: str, command: list[str]) -> str:
    """`docker run` of COMMAND in IMAGE, with the entrypoint keep_ngc_entrypoint chose."""
    return f"docker run {shlex.join(options)} $ep {shlex.quote(image)} {shlex.join(command)}"


def remove_labelled(label: str, stop_grace_s: int | None = None) -> str:
    """A shell command that removes the containers carrying LABEL (key=value), and only
    those; with STOP_GRACE_S, SIGTERM first and SIGKILL after that many seconds."""
    stop = f"docker stop -t {stop_grace_s} $ids >/dev/null; " if stop_grace_s is not None else ""
    found = f"docker ps -aq --filter label={shlex.quote(label)}"
    return f'ids=$({found}); [ -z "$ids" ] || {{ {stop}docker rm -f $ids >/dev/null; }}'
