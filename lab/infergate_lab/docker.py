"""Each node's own Docker engine, and the tiny local image the lab's faults run.

Several dockerd on one machine need, each: its own --data-root, --exec-root (dockerd starts
its own containerd there, with its own socket and state), --pidfile, socket, and its own
trust key (`deprecated-key-path`; the default /etc/docker/key.json would give every node
the same engine ID). --bridge=none and no iptables: containers use --network host, i.e. the
node's namespace, and no engine touches the host's firewall. Storage: overlay2 when the
kernel has overlayfs (it works on this ext4 root, also nested in the node's mount
namespace), else vfs (slow, copies every layer, but works on any file system).

The lab reads and drives its engines through the Engine API on their local sockets
(infergate.remote.docker_api.local_engine), the client the suite uses over SSH. `docker()`, the
CLI, remains for the faults that tag, remove and run by the CLI's words (faults.py,
faults_plan.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import docker as docker_py
from docker.errors import ImageNotFound

from infergate.remote.docker_api import API_ERRORS, local_engine
from infergate_lab import layout as L
from infergate_lab.layout import NodeSpec
from infergate_lab.shell import LabError, run

LAB_IMAGE = "iglab/busybox"


def storage_driver() -> str:
    return "overlay2" if "overlay" in Path("/proc/filesystems").read_text() else "vfs"


def daemon_json(spec: NodeSpec) -> Path:
    return spec.data_dir / "daemon.json"


def ensure_node_files(spec: NodeSpec) -> None:
    # --config-file of our own: the host's /etc/docker/daemon.json is not the node's.
    text = json.dumps({"deprecated-key-path": str(spec.data_dir / "docker-key.json")}) + "\n"
    path = daemon_json(spec)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def argv(spec: NodeSpec) -> list[str]:
    return dockerd_argv(
        daemon_json(spec),
        spec.data_dir / "docker",
        spec.run_dir / "docker",
        spec.run_dir / "docker.pid",
        spec.docker_host,
        spec.cgroup,
    )


def dockerd_argv(
    config: Path, data_root: Path, exec_root: Path, pidfile: Path, host: str, cgroup_parent: str
) -> list[str]:
    """A dockerd of the lab's own: its own roots and socket, host networking only (no
    bridge, no iptables), containers under `cgroup_parent`."""
    dockerd = shutil.which("dockerd", path="/usr/sbin:/usr/bin:/sbin:/usr/local/bin")
    if dockerd is None:
        raise LabError("dockerd is not installed (package docker.io)")
    return [
        dockerd,
        f"--config-file={config}",
        f"--data-root={data_root}",
        f"--exec-root={exec_root}",
        f"--pidfile={pidfile}",
        f"--host={host}",
        f"--storage-driver={storage_driver()}",
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-masq=false",
        "--userland-proxy=false",
        f"--cgroup-parent={cgroup_parent}",
        "--exec-opt=native.cgroupdriver=cgroupfs",
    ]


def engine(spec: NodeSpec, timeout_s: float = 60) -> docker_py.DockerClient:
    """The node's engine, on its local socket; TIMEOUT_S bounds each call's wait."""
    return local_engine(spec.docker_host, timeout_s)


def answers(spec: NodeSpec, timeout: float = 1.0) -> bool:
    """The engine answers its API (its version, then /_ping) on the node's socket."""
    try:
        with contextlib.closing(engine(spec, timeout)) as client:
            return bool(client.ping())
    except API_ERRORS:
        return False


def docker(spec: NodeSpec, *args: str, timeout: float = 60, stdin: bytes | None = None) -> str:
    """The docker CLI against the node's engine; its stdout."""
    return run(["docker", "-H", spec.docker_host, *args], timeout=timeout, stdin=stdin).stdout


def image_present(spec: NodeSpec, ref: str = LAB_IMAGE) -> bool:
    with contextlib.closing(engine(spec)) as client:
        try:
            client.images.get(ref)
        except ImageNotFound:
            return False
        return True


def busybox_rootfs() -> bytes:
    """A tar of a root file system holding only the static busybox and its applet links."""
    applets = run([str(L.BUSYBOX_BIN), "--list"]).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(L.BUSYBOX_BIN), arcname="bin/busybox")
        for name in (a for a in applets if a != "busybox"):
            link = tarfile.TarInfo(f"bin/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for d in ("tmp", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
    return buf.getvalue()


def make_image(spec: NodeSpec, ref: str = LAB_IMAGE) -> str:
    """Import the busybox image into the node's engine, no registry involved; its ID."""
    repository, _, tag = ref.partition(":")
    with contextlib.closing(engine(spec)) as client:
        client.api.import_image_from_data(
            busybox_rootfs(), repository=repository, tag=tag or None, changes=['CMD ["/bin/sh"]']
        )
        return str(client.images.get(ref).id)
