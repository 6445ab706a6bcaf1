"""Getting the engine image and the models onto the lab nodes, the way the field did it.

The image: the `docker save` tarball streamed into each node's engine (the Engine API's
load, as `docker load` sends it; the ID survives save and load), then the image ID, read
through the API, compared across nodes. A model directory: controller -> first node over
the management network (`tar c | ssh NODE tar x`), then first node -> every other node over
the fabric. The nodes' sshd listens on the management address only, so the fabric copy is a
tar stream over a one-off TCP socket between the nodes' fabric addresses (python3 at both
ends, run inside the nodes). Nodes that already hold the same thing are skipped.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from docker.errors import ImageNotFound

from infergate_lab import layout as L
from infergate_lab import sshd
from infergate_lab.clock import Clock
from infergate_lab.engine_image import CachedImage
from infergate_lab.lab import Lab
from infergate_lab.pipes import pipeline
from infergate_lab.shell import LabError, run

LOAD_TIMEOUT_S = 1200.0
COPY_TIMEOUT_S = 900.0
FABRIC_PORT = 29450
NODE_PYTHON = "/usr/bin/python3"  # the nodes' own; the controller's venv is not theirs

Manifest = dict[str, tuple[int, str]]  # relative file path -> (size in bytes, sha256)


def image_id(lab: Lab, node: str, ref: str) -> str | None:
    """The ID of ref in the node's engine, read through its API as the suite reads it."""
    with contextlib.closing(lab.engine(node)) as client:
        try:
            return str(client.images.get(ref).id)
        except ImageNotFound:
            return None


def ensure_image_on_nodes(lab: Lab, nodes: list[str], image: CachedImage, clock: Clock) -> None:
    """Load the tarball into every node that lacks this image ID; then prove all hold it."""
    ref, expected_id, tarball = image.ref, image.image_id, image.tarball
    for node in nodes:
        before = image_id(lab, node, ref)
        if before == expected_id:
            clock.say(f"{node}: has {ref} {expected_id[:19]}: skipped")
            continue
        with clock.lap(f"image load {node}"):
            _load(lab, node, tarball)
        if before is not None:
            _remove_if_old_build(lab, node, before)
    found = {node: image_id(lab, node, ref) for node in nodes}
    if wrong := {n: i for n, i in found.items() if i != expected_id}:
        raise LabError("; ".join(_image_problem(lab, n, i, image) for n, i in wrong.items()))


def _load(lab: Lab, node: str, tarball: Path) -> None:
    """The tarball streamed into the node's engine as `docker load` sends it, never held in
    memory; LOAD_TIMEOUT_S bounds the engine's silence while it unpacks the layers."""
    engine = lab.engine(node, LOAD_TIMEOUT_S)
    with contextlib.closing(engine) as client, tarball.open("rb") as stream:
        client.images.load(stream)


def _remove_if_old_build(lab: Lab, node: str, old_id: str) -> None:
    """An older build of ours that the load left untagged: 3 GB nobody uses. Anything else
    that had the tag (someone's own image, a fault's) keeps its other names and stays."""
    with contextlib.closing(lab.engine(node, 120)) as client:
        try:
            old = client.images.get(old_id)
        except ImageNotFound:
            return
        labels = (old.attrs.get("Config") or {}).get("Labels") or {}
        if not old.tags and labels.get("org.infergate.recipe"):
            client.images.remove(old_id)


def _image_problem(lab: Lab, node: str, found: str | None, image: CachedImage) -> str:
    addr = lab.spec(node).mgmt_ip
    return (
        f"{node} ({addr}): {image.ref} has ID {found or 'none (absent)'}, expected "
        f"{image.image_id}; remedy: cat {image.tarball} | ssh root@{addr} docker load"
    )


# $1 directory: {relative path: [size, sha256]} as JSON; {} when it is missing.
_MANIFEST = """import hashlib, json, os, sys
root, found = sys.argv[1], {}
for d, _, files in os.walk(root):
    for f in files:
        p, h = os.path.join(d, f), hashlib.sha256()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        found[os.path.relpath(p, root)] = [os.path.getsize(p), h.hexdigest()]
print(json.dumps(found))
"""


def local_manifest(root: Path) -> Manifest:
    done = run([sys.executable, "-c", _MANIFEST, str(root)], timeout=300)
    return _parse_manifest(done.stdout)


def node_manifest(lab: Lab, node: str, path: str) -> Manifest:
    """Size and sha256 of each file under path on the node (empty when it is missing)."""
    done = lab.ssh(node, [shlex.join([NODE_PYTHON, "-c", _MANIFEST, path])], timeout=300)
    if done.returncode != 0:
        raise LabError(f"{node}: cannot read {path}: {done.stderr.strip()[-500:]}")
    return _parse_manifest(done.stdout)


def _parse_manifest(text: str) -> Manifest:
    return {name: (int(size), digest) for name, (size, digest) in json.loads(text).items()}


def _unpack_script(dest: str) -> str:
    """A shell script that unpacks a tar on stdin as dest, replacing it only when complete."""
    d, tmp = shlex.quote(dest), shlex.quote(dest + ".partial")
    return f"set -e; rm -rf {tmp}; mkdir -p {tmp}; tar -x -C {tmp}; rm -rf {d}; mv {tmp} {d}"


def ensure_dir_on_nodes(lab: Lab, nodes: list[str], src: Path, name: str, clock: Clock) -> str:
    """The directory src as /srv/models/<name> on every node, sizes and sha256 checked;
    returns the path on the nodes. The first node gets it over the management network,
    the others from the first over the fabric."""
    dest, want = f"{L.MODELS_MOUNTPOINT}/{name}", local_manifest(src)
    first = nodes[0]
    for node in nodes:
        if node_manifest(lab, node, dest) == want:
            continue
        if node == first:
            with clock.lap(f"{name} -> {first} (management)"):
                ssh = sshd.ssh_argv(lab.spec(first), [_unpack_script(dest)])
                pipeline([["tar", "-C", str(src), "-c", "."], ssh], timeout=COPY_TIMEOUT_S)
        else:
            with clock.lap(f"{name} {first} -> {node} (fabric)"):
                fabric_copy(lab, first, node, dest)
        if (have := node_manifest(lab, node, dest)) != want:
            where = f"{node} ({lab.spec(node).mgmt_ip}): {dest} after copying"
            raise LabError(f"{where}: {_differences(have, want)}")
    return dest


def _differences(have: Manifest, want: Manifest) -> str:
    def show(entry: tuple[int, str] | None) -> str:
        return "missing" if entry is None else f"{entry[0]} bytes, sha256 {entry[1][:12]}"

    names = sorted(n for n in have.keys() | want.keys() if have.get(n) != want.get(n))
    found = [f"{n} is {show(have.get(n))}, expected {show(want.get(n))}" for n in names[:4]]
    return "; ".join(found) + (f" (and {len(names) - 4} more)" if len(names) > 4 else "")


# $1 address, $2 port, $3 shell script that reads the stream on its stdin.
_RECEIVE = """import socket, subprocess, sys
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
srv.settimeout(60)
conn, _ = srv.accept()
conn.setblocking(True)  # a timeout made the fd non-blocking: tar would read EAGAIN
sys.exit(subprocess.run(["sh", "-c", sys.argv[3]], stdin=conn.fileno()).returncode)
"""
# $1 address, $2 port, $3 directory to send; retries while the receiver starts listening.
_SEND = """import socket, subprocess, sys, time
end = time.monotonic() + 30
while True:
    try:
        s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
        break
    except OSError:
        if time.monotonic() > end:
            raise
        time.sleep(0.2)
s.setblocking(True)  # a timeout made the fd non-blocking: tar would write short
rc = subprocess.run(["tar", "-C", sys.argv[3], "-c", "."], stdout=s.fileno()).returncode
s.shutdown(socket.SHUT_WR)
sys.exit(rc)
"""


def fabric_copy(lab: Lab, src_node: str, dst_node: str, path: str) -> None:
    """Copy path from one node to the same path on another over the fabric link."""
    addr, port = lab.spec(dst_node).fabric_ip, str(FABRIC_PORT)
    receive = [NODE_PYTHON, "-c", _RECEIVE, addr, port, _unpack_script(path)]
    send = [NODE_PYTHON, "-c", _SEND, addr, port, path]
    with ThreadPoolExecutor(max_workers=1) as pool:
        receiving = pool.submit(lab.node_exec, dst_node, receive, COPY_TIMEOUT_S, False)
        sent = lab.node_exec(src_node, send, timeout=COPY_TIMEOUT_S, check=False)
        received = receiving.result()
    if sent.returncode or received.returncode:
        where = f"{path} {src_node} -> {dst_node} over the fabric ({addr}:{port})"
        errors = f"sender: {sent.stderr.strip()[-500:]}; receiver: {received.stderr.strip()[-500:]}"
        raise LabError(f"{where} failed: {errors}")
