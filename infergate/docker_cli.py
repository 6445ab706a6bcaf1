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
    run = f"docker run {shlex.join(options)} $ep {shlex.quote(image)} {shlex.join(command)}"
    keep = 'in *nvidia_entrypoint*|null|"") ep= ;; *) ep=--entrypoint= ;; esac'
    return f'case "$({inspect} 2>/dev/null)" {keep}\n{run}'
