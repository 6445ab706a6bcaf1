"""Each node's Docker Engine API (docker-py's `DockerClient`) over the SSH master the suite
already holds: the engine's socket is forwarded through it (`ssh -O forward`), and the client
talks to the local end (docs/internals.md#docker-over-ssh). The plan's env travels in the
create request's body, never on a command line and never logged.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import requests
from docker.errors import DockerException, NotFound
from docker.models.containers import Container

from infergate.engines.container import ContainerSpec, clears_entrypoint
from infergate.plan.model import Node
from infergate.waiting import Deadline, WaitTimedOut, wait_until

# each API call's socket timeout; a longer call (a wait, a load) names its own
API_TIMEOUT = Deadline(60, "docker_api.API_TIMEOUT")
# an ssh round trip to read DOCKER_HOST (it may open the master: connect and key exchange)
SSH_TIMEOUT = Deadline(30, "docker_api.SSH_TIMEOUT")
DEFAULT_HOST = "unix:///var/run/docker.sock"  # dockerd's default, when DOCKER_HOST is unset
SOCKET_NAME = "engine.sock"
# what a call to an engine can raise: docker-py's errors, and requests' own where the
# connection itself fails (a forward whose master has gone, a socket read timing out)
API_ERRORS = (DockerException, requests.RequestException)
# sun_path holds 108 bytes: a longer path makes `ssh -O forward` fail with a vague error
SUN_PATH_MAX = 107

# One round trip: the engine's address as a `docker` on the node would use it, whether TLS
# is asked of it, and whether this login may open a unix socket there (`-w`: sshd connects
# as this user, and a refused connect reaches the client only as a closed connection).
_READ_HOST = (
    f"host=${{DOCKER_HOST:-{DEFAULT_HOST}}}\n"
    + r"""printf '%s\n%s\n' "$host" "${DOCKER_TLS_VERIFY:-}"
case $host in unix://*) s=${host#unix://}
  if [ ! -S "$s" ]; then echo absent; elif [ -w "$s" ]; then echo ok; else echo denied; fi;;
*) echo ok;; esac"""
)


class EngineUnreachable(Exception):
    """A node's Docker engine cannot be reached; the message names the node (name and
    address), what failed, and the command that mends it."""


def engine_said(error: Exception) -> str:
    """The engine's own words (APIError.explanation: "No such image: x:1"), or the error's."""
    return str(getattr(error, "explanation", None) or error)


@contextlib.contextmanager
def node_engine(
    node: Node, ssh_config: Path | None, workdir: Path
) -> Iterator[docker.DockerClient]:
    """The node's Docker engine over the SSH ControlMaster (ssh_config None: this machine's
    own engine, per DOCKER_HOST). The forward is cancelled and the local socket removed on
    exit, whatever happened."""
    if ssh_config is None or node.ssh.connection == "local":
        host = os.environ.get("DOCKER_HOST") or DEFAULT_HOST
        with contextlib.closing(_connect(node, host, host)) as client:
            yield client
        return
    remote = _remote_target(node, ssh_config)
    _check_master(node, ssh_config)
    private = Path(tempfile.mkdtemp(prefix=f"docker-{node.name}-", dir=workdir))  # 0700
    local = private / SOCKET_NAME
    spec = f"{local}:{remote}"
    try:
        _forward(node, ssh_config, spec, len(str(local)))
        try:
            with contextlib.closing(_connect(node, f"unix://{local}", remote)) as client:
                yield client
        finally:
            _ssh(ssh_config, node, "-O", "cancel", "-L", spec)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def local_engine(docker_host: str, timeout_s: float = API_TIMEOUT.seconds) -> docker.DockerClient:
    """A client of the engine at DOCKER_HOST (`unix:///...`, `tcp://host:port`); TIMEOUT_S bounds
    each call's wait. It speaks the engine's own API version (Docker 20.10 speaks 1.41); an
    engine that does not answer raises DockerException here."""
    # whole seconds, as the stubs type it (requests takes any number)
    return docker.DockerClient(base_url=docker_host, version="auto", timeout=max(1, int(timeout_s)))


def create_container(
    client: docker.DockerClient,
    spec: ContainerSpec,
    command: Sequence[str],
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Container:
    """SPEC's container running COMMAND, created and not started; the image's entrypoint kept or
    cleared (clears_entrypoint) unless engine.docker_args names one. Never pulls: an image the
    node lacks raises docker.errors.ImageNotFound."""
    kwargs = spec.create_kwargs()
    if "entrypoint" not in kwargs:
        config = client.images.get(spec.image).attrs.get("Config") or {}
        kwargs["entrypoint"] = [] if clears_entrypoint(config.get("Entrypoint")) else None
    return client.containers.create(
        spec.image, list(command), name=name, labels=dict(labels or {}), **kwargs
    )


@dataclass(frozen=True)
class Exited:
    """A container's end: its exit status (None: still running at its deadline, and removed),
    what it wrote to stdout and to stderr."""

    status: int | None
    stdout: str
    stderr: str


def run_to_exit(
    client: docker.DockerClient,
    spec: ContainerSpec,
    command: Sequence[str],
    deadline: Deadline,
    name: str,
    labels: Mapping[str, str],
) -> Exited:
    """Create SPEC's container running COMMAND, start it, wait for its exit until DEADLINE,
    read its output, and remove it: also when the deadline passes (status None, the wait's
    words after its stderr), on an error, or on Ctrl-C."""
    container = create_container(client, spec, command, name, labels)
    try:
        container.start()
        try:
            status: int | None = wait_until(lambda: _exit_status(container), name, deadline)
            late = ""
        except WaitTimedOut as e:
            status, late = None, f"\n{e}"
        out, err = (_logs(container, stdout=True), _logs(container, stderr=True) + late)
        return Exited(status, out, err)
    finally:
        with contextlib.suppress(NotFound):  # removed by a clean-up on Ctrl-C meanwhile
            container.remove(force=True)


def _exit_status(container: Container) -> tuple[int | None, str]:
    container.reload()
    state = container.attrs["State"]
    done = state["Status"] in ("exited", "dead")
    return (int(state["ExitCode"]) if done else None), f"container {state['Status']}"


def _logs(container: Container, stdout: bool = False, stderr: bool = False) -> str:
    text: bytes = container.logs(stdout=stdout, stderr=stderr)
    return text.decode(errors="replace")


def remove_labelled(
    client: docker.DockerClient, label: str, stop_grace_s: int | None = None
) -> list[str]:
    """Remove the containers carrying LABEL (key=value), and only those; with STOP_GRACE_S,
    SIGTERM first and SIGKILL after that many seconds. Their names."""
    found = client.containers.list(all=True, filters={"label": label})
    for container in found:
        stop_and_remove(container, stop_grace_s)
    return [str(c.name) for c in found]


def stop_and_remove(container: Container, stop_grace_s: int | None = None) -> None:
    """Remove CONTAINER; with STOP_GRACE_S, SIGTERM first and SIGKILL after that many
    seconds. One that is gone meanwhile is what was asked."""
    with contextlib.suppress(NotFound):
        if stop_grace_s is not None:
            container.stop(timeout=stop_grace_s)
        container.remove(force=True)


def _remote_target(node: Node, config: Path) -> str:
    """Where the node's engine listens, as `ssh -L` names a target: its unix socket path or
    host:port. Running this opens the node's master when there is none (ControlMaster auto)."""
    done = _ssh(config, node, "-T", "--", node.name, _READ_HOST)
    if done.returncode != 0:
        raise EngineUnreachable(
            f"{node.where}: cannot read its DOCKER_HOST over SSH (exit {done.returncode}): "
            f"{done.stderr.strip()[-300:] or 'no output'}\n"
            f"    fix: make `{shlex.join(node.ssh_argv('true'))}` work"
        )
    host, tls, access = [*done.stdout.splitlines(), "", "", ""][:3]
    return _target(node, host, tls, access)


def _target(node: Node, host: str, tls: str, access: str) -> str:
    """The forward's target for DOCKER_HOST=HOST on NODE, or why there is none."""
    where = f"{node.where}: its Docker engine at {host} (DOCKER_HOST)"
    if tls:
        raise EngineUnreachable(
            f"{where} asks for TLS (DOCKER_TLS_VERIFY={tls}), which a forwarded socket does "
            "not speak\n    fix: serve the engine on its unix socket for the gate "
            "(dockerd -H unix:///var/run/docker.sock) and unset DOCKER_TLS_VERIFY for SSH logins"
        )
    if host.startswith("unix://"):
        return _unix_target(node, where, host.removeprefix("unix://"), access)
    if host.startswith("tcp://"):
        return host.removeprefix("tcp://").rstrip("/")  # host:port, forwarded as it is
    raise EngineUnreachable(
        f"{where}: only unix:// and tcp:// engines can be forwarded over SSH\n"
        f"    fix: point DOCKER_HOST on the node at the engine's unix socket "
        f"(unset, it is {DEFAULT_HOST})"
    )


def _unix_target(node: Node, where: str, path: str, access: str) -> str:
    user = node.ssh.user
    if access == "absent":
        raise EngineUnreachable(
            f"{where}: no socket at {path}: dockerd is not running, or listens elsewhere\n"
            f"    fix: on the node, `sudo systemctl start docker` (or set DOCKER_HOST for "
            f"SSH logins to where it listens)"
        )
    if access == "denied":
        raise EngineUnreachable(
            f"{where}: {user} may not open {path} (permission denied)\n"
            f"    fix: on the node, `sudo usermod -aG docker {user}`, then end the SSH master "
            f"so the next login has the group: `ssh -O exit {node.name}`"
        )
    return path


def _check_master(node: Node, config: Path) -> None:
    """A forward is asked of the master: refuse clearly when the config gives none."""
    done = _ssh(config, node, "-O", "check")
    if done.returncode != 0:
        raise EngineUnreachable(
            f"{node.where}: no SSH master to forward its Docker socket through: "
            f"{done.stderr.strip()[-300:] or 'no output'}\n"
            "    fix: the suite's ssh_config (infergate.remote.ssh_config) sets ControlMaster auto "
            "and a ControlPath; a user ssh_config must not set ControlMaster no for this node"
        )


def _forward(node: Node, config: Path, spec: str, local_length: int) -> None:
    if local_length > SUN_PATH_MAX:
        raise EngineUnreachable(
            f"{node.where}: the local end of its Docker socket forward would be "
            f"{local_length} bytes long, more than a unix socket path holds ({SUN_PATH_MAX})"
            "\n    fix: set TMPDIR to a shorter directory"
        )
    done = _ssh(config, node, "-O", "forward", "-L", spec)
    if done.returncode != 0:
        raise EngineUnreachable(
            f"{node.where}: the SSH master refused to forward its Docker socket ({spec}): "
            f"{done.stderr.strip()[-300:] or 'no output'}\n"
            "    fix: allow stream forwarding in the node's sshd_config "
            "(AllowStreamLocalForwarding yes, AllowTcpForwarding yes), then reload sshd"
        )


def _connect(node: Node, docker_host: str, engine: str) -> docker.DockerClient:
    """A client of NODE's engine at DOCKER_HOST, which has answered; ENGINE names it."""
    try:
        return local_engine(docker_host)
    except DockerException as e:
        raise EngineUnreachable(
            f"{node.where}: its Docker engine at {engine} does not answer: {e}\n"
            "    fix: on the node, `sudo systemctl status docker` says why; "
            "`sudo systemctl start docker` starts it"
        ) from None


def _ssh(config: Path, node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    """`ssh -F CONFIG ARGS NODE` (control commands) or `ssh -F CONFIG -T -- NODE CMD`;
    an ssh that outlives SSH_TIMEOUT is reported as its failure."""
    argv = ["ssh", "-F", str(config), *args]
    argv += [] if "--" in args else [node.name]
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=SSH_TIMEOUT.seconds, check=False
        )
    except subprocess.TimeoutExpired:
        said = f"ssh did not return within {SSH_TIMEOUT}"
        return subprocess.CompletedProcess(argv, 255, "", said)
