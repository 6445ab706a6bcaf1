"""A Docker engine of our own on the controller, only while the lab engine image is built.

Why not a lab node's engine: the nodes have no route off the lab's networks, and the image's
pip install needs the package registry. This dockerd runs in the controller's network
namespace with everything of its own under one fresh directory (data root, exec root and
its containerd, socket, pid file, trust key: the default /etc/docker/key.json would be
machine-wide state), no bridge and no firewall rules (containers use --network host).
Stopping it removes exactly what it made: its directory, the cgroup parent its containers
used, and the shared run directories dockerd/containerd create, if they were not there.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from infergate.waiting import Deadline, WaitTimedOut, wait_until
from infergate_lab import layout as L
from infergate_lab.cgroups import Cgroups, remove_tree
from infergate_lab.docker import dockerd_argv
from infergate_lab.procs import Proc, stop, tree
from infergate_lab.shell import Done, LabError, mount_points, run

BUILD_CGROUP = "infergate-engine-build"
WORK_PARENT = Path("/var/tmp")  # on disk: a build data root holds several GB
START_DEADLINE = Deadline(60.0, "infergate_lab.builder.START_DEADLINE")
# dockerd stops its build containers first on SIGTERM; then what is left of its tree (shims)
DOCKERD_STOP = Deadline(30.0, "infergate_lab.builder.DOCKERD_STOP")
SHIMS_STOP = Deadline(10.0, "infergate_lab.builder.SHIMS_STOP")

Say = Callable[[str], None]


@dataclass(frozen=True)
class BuildEngine:
    """The running build engine: `docker(...)` talks to it."""

    root: Path

    @property
    def sock(self) -> Path:
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.sock}"

    def docker(self, *args: str, timeout: float = 60, check: bool = True) -> Done:
        return run(["docker", "-H", self.host, *args], timeout=timeout, check=check)

    def docker_logged(self, *args: str, log: Path, timeout: float) -> int:
        """`docker ARGS`, its output written to LOG as it comes; its exit status."""
        return run_logged(["docker", "-H", self.host, *args], log, timeout)


def run_logged(argv: list[str], log: Path, timeout: float) -> int:
    """ARGV with stdout and stderr streamed into LOG as they come (a step of many minutes:
    `tail -f` shows where it is, and what it said stays if it is killed); its exit status."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                cwd="/",
            )
        except subprocess.TimeoutExpired:
            raise LabError(
                f"`{' '.join(argv)}` did not finish within {timeout:g} s (its output: {log})"
            ) from None
    return done.returncode


@contextmanager
def build_engine(say: Say) -> Iterator[BuildEngine]:
    """A dockerd of our own for the duration of the block; removed, with its data, after."""
    root = Path(tempfile.mkdtemp(prefix="infergate-build-", dir=WORK_PARENT))
    shared_before = {d: d.exists() for d in _shared_paths()}
    engine = BuildEngine(root)
    proc: Proc | None = None
    try:
        proc = _start(engine)
        say(f"build engine: dockerd pid {proc.pid} at {engine.host}")
        yield engine
    finally:
        if proc is not None:
            _stop(proc)
        _remove(engine, shared_before)
        say("build engine: stopped and removed")


def _shared_paths() -> list[Path]:
    # runc makes the cgroup parent in every hierarchy (cgroupfs driver)
    cgroups = [h / BUILD_CGROUP for h in Cgroups.detect().hierarchies]
    return [*L.DOCKER_SHARED_RUN_DIRS, *cgroups]


def _argv(engine: BuildEngine) -> list[str]:
    config = engine.root / "daemon.json"
    config.write_text(json.dumps({"deprecated-key-path": str(engine.root / "key.json")}))
    root = engine.root
    return dockerd_argv(
        config, root / "data", root / "exec", root / "docker.pid", engine.host, f"/{BUILD_CGROUP}"
    )


def _start(engine: BuildEngine) -> Proc:
    log = open(engine.root / "dockerd.log", "ab")  # noqa: SIM115 (the child keeps it open)
    with log:
        popen = subprocess.Popen(
            _argv(engine),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd="/",
        )
    proc = Proc.of(popen.pid)

    def answers() -> tuple[bool | None, str]:
        if popen.poll() is not None:
            raise LabError(f"the build dockerd exited {popen.returncode}")
        return (True if _answers(engine.sock) else None), f"no answer on {engine.sock}"

    try:
        wait_until(answers, "the build dockerd answering", START_DEADLINE, every_s=0.2)
    except (LabError, WaitTimedOut) as e:
        _stop(proc)
        tail = (engine.root / "dockerd.log").read_text(errors="replace")[-1500:]
        raise LabError(f"{e}:\n{tail}") from None
    return proc


def _answers(sock: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(str(sock))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in s.recv(64).split(b"\r\n")[0]
    except OSError:
        return False


def _stop(proc: Proc) -> None:
    # dockerd stops its containers and its containerd itself on SIGTERM; the rest of its
    # tree (shims) goes after, so nothing of ours outlives the build.
    members = tree(proc)
    stop([proc], DOCKERD_STOP)
    stop([p for p in members if p.alive()], SHIMS_STOP)


def _remove(engine: BuildEngine, shared_before: dict[Path, bool]) -> None:
    for m in sorted(mount_points(), key=len, reverse=True):
        if m.startswith(f"{engine.root}/"):
            run(["umount", "-l", m], check=False)
    shutil.rmtree(engine.root, ignore_errors=True)
    if engine.root.exists():
        raise LabError(f"could not remove the build engine's directory {engine.root}")
    for path, existed in shared_before.items():
        if existed:
            continue
        if path.is_relative_to("/sys/fs/cgroup"):
            remove_tree(path)
        else:
            _remove_empty_tree(path)


def _remove_empty_tree(top: Path) -> None:
    """rmdir a run directory we made if nothing but empty directories is left in it."""
    if not top.is_dir():
        return
    dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for d in [*dirs, top]:
        try:
            d.rmdir()
        except OSError:
            return  # not empty, or in use: someone else's now
