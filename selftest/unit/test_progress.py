"""Progress lines reach the terminal while the test that prints them still runs: in one
process and under xdist (`-n 2`), a real pytest in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from selftest.suite import ROOT, closed_plan

# The test that prints a line, then waits for the outer test to have read it on the run's
# terminal: were the line held until the test ends, it would wait for ever (the deadline is
# a backstop, the fail it ends in is the finding)
INNER = """
import time
from pathlib import Path

from infergate.fixtures.progress import print_now


def test_says_then_waits(pytestconfig):
    print_now(pytestconfig, "progress: first")
    go = Path({go!r})
    deadline = time.monotonic() + 120
    while not go.exists():
        assert time.monotonic() < deadline, "nobody read 'progress: first' while this ran"
        time.sleep(0.05)
    print_now(pytestconfig, "progress: last")
"""


def run_inner(tmp_path: Path, *args: str) -> list[str]:
    """Run INNER under pytest with ARGS; once its first line is on the terminal, let it go
    on. The terminal's lines, in order."""
    go = tmp_path / "go"
    (tmp_path / "test_inner.py").write_text(INNER.format(go=str(go)))
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-s",
        "--report-dir",
        str(tmp_path / "report"),
        "--rootdir",
        str(tmp_path),
        "-c",
        "/dev/null",
        "--inventory",
        str(closed_plan(tmp_path)),
        *args,
        str(tmp_path / "test_inner.py"),
    ]
    seen = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=tmp_path) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            if "progress: first" in line:
                go.touch()
    return seen


@pytest.mark.parametrize("args", [("-p", "no:xdist"), ("-n", "2")], ids=["one process", "xdist"])
def test_a_progress_line_is_printed_while_its_test_runs(tmp_path: Path, args: tuple[str, ...]):
    seen = run_inner(tmp_path, *args)
    said = [ln for ln in seen if ln.startswith("progress: ")]
    assert said == ["progress: first", "progress: last"], "\n".join(seen)
    assert any("1 passed" in ln for ln in seen), "\n".join(seen)
    # the summary comes after the worker's last line: nothing is left unprinted at the end
    assert seen.index("progress: last") < next(i for i, ln in enumerate(seen) if "1 passed" in ln)


HASHING = """
def test_hashes(model_hashes):
    assert model_hashes.every()
"""


def test_the_model_hash_says_per_node_what_it_read_under_xdist(tmp_path: Path) -> None:
    """The real fixture on the plan whose one node is this machine: its summary (bytes,
    seconds, cache hits) reaches the terminal from a worker before the run's summary."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 4096)
    plan = yaml.safe_load((ROOT / "inventories" / "h200-device.yaml").read_text())
    plan["model"]["path"] = str(model)
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    (tmp_path / "test_hashing.py").write_text(HASHING)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-n",
        "2",
        "--report-dir",
        str(tmp_path / "report"),
        "--rootdir",
        str(tmp_path),
        "-c",
        "/dev/null",
        "--inventory",
        str(tmp_path / "plan.yaml"),
        str(tmp_path / "test_hashing.py"),
    ]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "HOME": str(tmp_path / "home")},
    )
    lines = done.stdout.splitlines()
    said = [ln for ln in lines if ln.startswith("model hash: ")]
    assert said, done.stdout
    assert said[-1].startswith("model hash: h200 (localhost): hashed 2 file(s), 0.00 GB, in ")
    assert said[-1].endswith("; 0 from the cache")
    assert lines.index(said[-1]) < next(i for i, ln in enumerate(lines) if "1 passed" in ln)
