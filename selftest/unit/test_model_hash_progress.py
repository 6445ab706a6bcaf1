"""The model hash says how far it is while it runs, and afterwards what it read, how long it
took and what the cache spared: the node's real script on this machine's files, through the
same Remote the fixture uses."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from pathlib import Path

import pytest

from infergate.checks.model_hash import (
    HashProgress,
    ModelHashes,
    hash_command,
    parse_hash_progress,
    parse_model_hashes,
)
from infergate.fixtures.inventory import load_inventory
from infergate.plan.model import Ssh
from infergate.remote.ssh import Remote

ROOT = Path(__file__).resolve().parents[2]
LOCAL = dataclasses.replace(
    load_inventory(ROOT / "inventories" / "lab.yaml").nodes[0], ssh=Ssh(connection="local")
)
MIB = 1 << 20


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A model folder of real files (its cache under a HOME of its own)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model-00001-of-00002.safetensors").write_bytes(os.urandom(8 * MIB))
    return folder


def test_progress_comes_while_the_hash_still_reads(model: Path) -> None:
    """The second shard is a pipe the test writes only once a progress line has shown the
    first shard hashed: that line came while the script still ran (no clock involved)."""
    shard = model / "model-00002-of-00002.safetensors"
    os.mkfifo(shard)
    seen: list[HashProgress] = []
    first_done = threading.Event()

    def on_err(line: str) -> None:
        if (p := parse_hash_progress(line)) is not None:
            seen.append(p)
            if p.done >= 8 * MIB + 2:
                first_done.set()

    result: list[ModelHashes] = []
    command = hash_command(str(model), "full", every_s=0.05)
    reader = threading.Thread(
        target=lambda: result.append(
            parse_model_hashes(Remote(LOCAL, None, 60).read(command, "hash", on_err=on_err).stdout)
        )
    )
    reader.start()
    assert first_done.wait(60), f"no progress line showed the first shard hashed: {seen}"
    tail = os.urandom(3 * MIB)
    with shard.open("wb") as pipe:
        pipe.write(tail)
    reader.join(60)
    (hashes,) = result
    assert hashes.sha256["model-00002-of-00002.safetensors"] == hashlib.sha256(tail).hexdigest()
    assert all(p.total == 8 * MIB + 2 for p in seen)  # the pipe's size is 0 to stat
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    assert (hashes.hashed, hashes.hashed_bytes, hashes.cache_hits) == (3, 8 * MIB + 2, 0)


def test_a_second_hash_says_what_the_cache_spared(model: Path) -> None:
    remote = Remote(LOCAL, None, 60)
    first = parse_model_hashes(remote.read(hash_command(str(model), "cached"), "hash").stdout)
    again = parse_model_hashes(remote.read(hash_command(str(model), "cached"), "hash").stdout)
    assert (first.hashed, first.hashed_bytes, first.cache_hits) == (2, 8 * MIB + 2, 0)
    assert (again.hashed, again.hashed_bytes, again.cache_hits) == (0, 0, 2)
    assert str(again).startswith("hashed 0 file(s), 0.00 GB, in ")
    assert str(again).endswith("; 2 from the cache")


def test_a_progress_line_reads_in_gigabytes_and_rate() -> None:
    line = '{"done": 45000000000, "total": 127000000000, "seconds": 60.0}'
    assert str(parse_hash_progress(line)) == "45.00 of 127.00 GB (35 %), 750 MB/s"
    assert parse_hash_progress("<string>:1: DeprecationWarning: x") is None
    assert parse_hash_progress("[1, 2]") is None
