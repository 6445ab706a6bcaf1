"""The model hash cache, run for real on this machine (the node's script, its own python3):
it writes once per change of the model, never on an unchanged one, and leaves no temp file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from infergate.checks.model_hash import hash_command, parse_model_hashes


def hashed(model: Path, home: Path) -> int:
    env = {**os.environ, "HOME": str(home)}
    done = subprocess.run(
        ["sh", "-c", hash_command(str(model), "cached")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return parse_model_hashes(done.stdout).hashed


def cache_files(home: Path) -> dict[str, int]:
    folder = home / ".cache" / "infergate" / "sha256"
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} if folder.exists() else {}


def test_an_unchanged_model_writes_nothing(tmp_path):
    model, home = tmp_path / "model", tmp_path / "home"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert (hashed(model, home), len(cache_files(home))) == (1, 1)
    os.utime(next((home / ".cache/infergate/sha256").iterdir()), ns=(1, 1))  # a write shows
    written = cache_files(home)
    assert hashed(model, home) == 0
    assert cache_files(home) == written, "the cache was written again for an unchanged model"
    (model / "config.json").write_text('{"changed": 1}')
    assert hashed(model, home) == 1
    assert list(cache_files(home)) == list(written)  # rewritten in place, no temp file left
    assert cache_files(home) != written
