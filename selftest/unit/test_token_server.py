"""The loopback token server the client bench measures against (infergate_lab.token_server),
run for real as its own process and read by our client: its streams are framed as vLLM's,
keep the schedule's token count and usage, and its stamps say what it wrote and how many
streams it held at once. Nothing here is timed against a limit: the bench measures."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infergate.inference.client import stream_completion
from infergate.inference.conformance import check_stream
from infergate.inference.load import run_load
from infergate.inference.sse import framing_problems

TOKENS, TTFT_MS, ITL_MS = 5, 200, 10


class Running:
    """The server as its own process; `stop` ends it as the bench does and reads its stamps."""

    def __init__(self, stamps: Path, ttft_ms: float = TTFT_MS) -> None:
        command = [sys.executable, "-m", "infergate_lab.token_server", "--stamps", str(stamps)]
        command += ["--tokens", str(TOKENS), "--ttft-ms", str(ttft_ms), "--itl-ms", str(ITL_MS)]
        self.stamps = stamps
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{self.process.stdout.readline().split()[-1]}/v1"

    def stop(self) -> dict:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(30) == 0
        return json.loads(self.stamps.read_text())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    running = Running(tmp_path / "stamps.json")
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_a_stream_is_framed_as_vllms_with_the_schedules_tokens(server, path) -> None:
    body = {"model": "token-server", "max_tokens": 3}
    body |= (
        {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"}
    )
    record = stream_completion(server.url, path, body, 10)
    assert check_stream(record) == [], record
    assert framing_problems(record.raw) == []
    assert (record.content_chunks, record.completion_tokens) == (3, 3)
    assert record.text == "tok " * 3
    assert record.finish_reason == "length"


def test_the_stamps_hold_every_event_written_and_the_streams_held_at_once(server) -> None:
    body = {"model": "token-server", "messages": [{"role": "user", "content": "hi"}]}
    run = run_load(server.url, "/chat/completions", [body] * 8, 4, 10)
    assert all(r.ok for r in run.records), run.records
    assert sum(r.content_chunks for r in run.records) == 8 * TOKENS
    served = server.stop()
    assert served["held_max"] == 4  # each request lasts 240 ms: the four streams overlap
    assert len(served["requests"]) == 8
    for request in served["requests"]:
        sent = request["sent"]
        assert len(sent) == TOKENS
        assert sent == sorted(sent)
        # never early: each event at or after its due time (1 ms for the clocks' rounding)
        due = [(TTFT_MS + k * ITL_MS) / 1e3 - 1e-3 for k in range(TOKENS)]
        assert all(t - request["received"] >= d for t, d in zip(sent, due, strict=True))


def test_a_level_holds_every_stream_it_was_asked_for(tmp_path: Path) -> None:
    """512 streams at once on one event loop, each waiting 3 s for its first token: the
    server sees all of them open together, and every one whole (threads held 733 of
    1,024: docs/performance.md#the-load-client-at-scale)."""
    streams = 512
    server = Running(tmp_path / "stamps.json", ttft_ms=3000)
    try:
        body = {"model": "token-server", "prompt": "hi"}
        run = run_load(server.url, "/completions", [body] * streams, streams, 60)
    finally:
        served = server.stop()
    assert [r.error for r in run.records if not r.ok] == []
    assert sum(r.content_chunks for r in run.records) == streams * TOKENS
    assert served["held_max"] == streams
