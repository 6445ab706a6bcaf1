"""The launch's heartbeat: while a gate waits, each node it waits on is named with the last
thing its log shows, a progress bar's latest step among them, and never a secret."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infergate.deploy import gates
from infergate.deploy.failure import LaunchFailed
from infergate.deploy.state import DeployOptions, LaunchState
from infergate.deploy.streams import News, lines_of
from infergate.deploy.watch import Heartbeat, last_said
from infergate.engines.launch import Launch, Milestone
from infergate.fixtures.inventory import load_inventory
from infergate.plan.apikey import HIDDEN
from infergate.waiting import Deadline
from selftest.unit.test_api_key import local_io

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hf_s3cr3t_token_value"

# What vLLM's weight load writes: tqdm's bar redrawn after "\r" inside one line (as the
# lab's recorded log shows it: selftest/data/deploy/vllm-tp2-node1.log), coloured INFO
# lines, and an argument line that carries a secret
WRITER = r"""
import sys, time
out = sys.stdout
out.write("\x1b[32mINFO\x1b[0m 11-30 04:33:29 [loader.py:41] token=%s\n" % sys.argv[1])
for done in range(6):
    out.write("\rLoading safetensors checkpoint shards: %3d%% Completed | %d/11 [00:0%d<?]"
              % (done * 100 // 11, done, done))
    out.flush()
    time.sleep(0.01)
out.write("\r\x1b[2K\n")
"""


def engine_log(tmp_path: Path) -> bytes:
    """The bytes a real process wrote to its log file."""
    log = tmp_path / "engine.log"
    with log.open("wb") as f:
        subprocess.run([sys.executable, "-c", WRITER, SECRET], stdout=f, check=True, timeout=60)
    return log.read_bytes()


def test_the_last_said_is_the_bars_latest_step_without_ansi_codes(tmp_path: Path) -> None:
    log = engine_log(tmp_path)
    for cut in (1, 7, 64, len(log)):  # however Docker's stream cuts it
        chunks = [log[i : i + cut] for i in range(0, len(log), cut)]
        lines = list(lines_of(chunks))
        assert (
            last_said(lines)
            == "Loading safetensors checkpoint shards:  45% Completed | 5/11 [00:05<?]"
        )
    assert last_said(lines[:1]) == f"INFO 11-30 04:33:29 [loader.py:41] token={SECRET}"
    assert last_said([]) == ""


def test_the_heartbeat_is_due_after_a_period_with_nothing_said() -> None:
    beat = Heartbeat(every_s=30.0, next_at=30.0)
    assert [beat.due(t) for t in (0.0, 29.9, 30.0, 45.0, 60.5, 61.0)] == [
        False,
        False,
        True,
        False,
        True,
        False,
    ]
    beat.said(70.0)  # a milestone: the next line 30 s after it
    assert [beat.due(t) for t in (90.6, 99.9, 100.0)] == [False, False, True]


def test_a_waiting_gate_names_the_node_behind_with_its_last_line_hidden(tmp_path: Path) -> None:
    """The weights gate waits on node1, whose log ends in the bar and a line with the plan's
    secret: each heartbeat says the node and the bar's step; the secret never."""
    gate = Milestone("weights loaded", r"Loading weights took", ("node1",), Deadline(1.5, "t.w"))
    launch = Launch("vllm", "run1", "http://127.0.0.1:9", "m", {"node1": "c1"}, (gate,), ())
    nodes = {n.name: n for n in load_inventory(ROOT / "inventories" / "lab.yaml").nodes}
    said: list[str] = []
    options = DeployOptions(secrets=(SECRET,))
    d = LaunchState(launch, {"node1": nodes["node1"]}, local_io, said.append, options)
    d.heartbeat = Heartbeat(every_s=0.5, next_at=0.0)
    log = engine_log(tmp_path).replace(b"\r\x1b[2K\n", b"\n") + f"loading {SECRET}\r\n".encode()
    d.news += [News("node1", line=line) for line in lines_of([log])]
    with pytest.raises(LaunchFailed, match="weights loaded"):
        gates.wait_for(d, gate)
    beats = [s for s in said if "waiting for weights loaded" in s]
    assert beats, said
    where = nodes["node1"].where
    assert beats[0].endswith(f"{where}: waiting for weights loaded; log: loading {HIDDEN}")
    assert not [s for s in said if SECRET in s]
