"""The node's hashing script hashes files in parallel, a read buffer per worker for every
file it takes: its digests are hashlib's of the whole file whatever the sizes, and a file it
cannot read stops it with the very error reading that file raises (the node's real script on
this machine's files)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
from pathlib import Path

import pytest

from infergate.checks.model_hash import READ_BYTES, hash_command, parse_model_hashes
from infergate.fixtures.inventory import load_inventory
from infergate.plan.model import Ssh
from infergate.remote.ssh import Remote

ROOT = Path(__file__).resolve().parents[2]
LOCAL = dataclasses.replace(
    load_inventory(ROOT / "inventories" / "lab.yaml").nodes[0], ssh=Ssh(connection="local")
)
# around the script's reads: none, a part of one, one exactly, one and a byte, several and a
# part; more files than workers, so a worker's buffer serves several files
SIZES = {
    "config.json": 0,
    "tokenizer.json": 1,
    "a/model-00001-of-00006.safetensors": READ_BYTES - 1,
    "a/model-00002-of-00006.safetensors": READ_BYTES,
    "a/model-00003-of-00006.safetensors": READ_BYTES + 1,
    "b/model-00004-of-00006.safetensors": 3 * READ_BYTES + 4097,
    "b/model-00005-of-00006.safetensors": 4096,
    "b/model-00006-of-00006.safetensors": 2 * READ_BYTES,
}


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A model folder of real files of assorted sizes (its cache under a HOME of its own)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = tmp_path / "model"
    for name, size in SIZES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(os.urandom(size))
    return folder


def test_every_digest_is_hashlibs_of_the_whole_file(model: Path) -> None:
    done = Remote(LOCAL, None, 120).read(hash_command(str(model), "full"), "hash")
    hashes = parse_model_hashes(done.stdout)
    expected = {n: hashlib.sha256((model / n).read_bytes()).hexdigest() for n in SIZES}
    assert hashes.sha256 == expected
    assert (hashes.hashed, hashes.hashed_bytes) == (len(SIZES), sum(SIZES.values()))


def _error_of(path: Path) -> str:
    """What reading PATH whole in this process raises, as a traceback's last line says it."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            while os.read(fd, READ_BYTES):
                pass
        finally:
            os.close(fd)
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    raise AssertionError(f"{path} was read whole: no error to compare")


@pytest.mark.parametrize("kind", ["cannot be opened", "cannot be read"])
def test_an_unreadable_file_stops_the_hash_with_its_own_error(
    model: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket cannot be opened (ENXIO, root or not); /proc/self/mem opens, and its first
    read fails (EIO): in a worker thread, whose error the script raises."""
    bad = model / "b" / "model-00007-of-00007.safetensors"
    if kind == "cannot be opened":
        listening = socket.socket(socket.AF_UNIX)
        monkeypatch.chdir(bad.parent)  # a socket's path: 107 bytes; xdist's folders are longer
        listening.bind(bad.name)
    else:
        bad.symlink_to("/proc/self/mem")
    done = Remote(LOCAL, None, 120).read(hash_command(str(model), "full"), "hash")
    assert done.exit_status == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == _error_of(bad)
