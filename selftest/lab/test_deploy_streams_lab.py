"""The launch watch's streams on a real lab node's Docker Engine API: a container's log line
arrives whole ("\\r" inside it), its death arrives as an event within a second of the kill,
and closing the streams ends every reader at once (a launch's end, Ctrl-C or SIGTERM must
not wait on a follower)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable

import pytest

from infergate.deploy.streams import News, Streams
from infergate.remote.docker_api import local_engine
from infergate_lab.docker import LAB_IMAGE

pytestmark = [pytest.mark.lab, pytest.mark.timeout(120)]

TALKER = "printf 'Loading 0%%\\rLoading 100%%\\nready\\n'; sleep 300"


class Reader:
    """What the streams said, in order, read one wanted thing at a time."""

    def __init__(self, streams: Streams) -> None:
        self.streams = streams
        self.heard: list[News] = []

    def next(self, wanted: Callable[[News], bool], seconds: float = 10) -> News:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.heard += self.streams.wait(end - time.monotonic())
            while self.heard:
                news = self.heard.pop(0)
                if wanted(news):
                    return news
        raise AssertionError(f"nothing wanted within {seconds} s")


def test_log_and_death_arrive_as_they_happen_and_close_ends_every_reader(lab):
    lab.make_image("node2")
    client = local_engine(lab.spec("node2").docker_host)
    label = ("infergate.selftest", secrets.token_hex(6))
    streams = Streams()
    streams.follow_events("node2", client, "=".join(label))
    container = client.containers.create(LAB_IMAGE, ["sh", "-c", TALKER], labels=dict([label]))
    try:
        container.start()
        streams.follow_log("node2", container)
        read = Reader(streams)
        assert read.next(lambda n: n.line is not None).line == "Loading 0%\rLoading 100%"
        assert read.next(lambda n: n.line is not None).line == "ready"
        killed = time.monotonic()
        container.kill()
        died = read.next(lambda n: n.event.get("Action") == "die")
        assert time.monotonic() - killed < 1.0
        assert died.event["Actor"]["Attributes"]["exitCode"] == "137"
    finally:
        container.remove(force=True)
        closing = time.monotonic()
        streams.close()
        client.close()
    assert time.monotonic() - closing < 2.0
    readers = [t for t in threading.enumerate() if t.name.startswith("infergate-stream-")]
    assert readers == [], "a stream's reader outlived close()"
