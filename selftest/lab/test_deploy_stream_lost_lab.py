"""A node's engine connection that drops mid-launch fails the launch within seconds, naming
the node, not at the gate's deadline (900 s and more) with a "no `weights loaded` line".

The drop is real: node2's engine is reached through a relay on this machine (the stand-in
of the SSH forward of its socket) whose connections are cut once its container started; the
relay keeps accepting, as an engine back after a restart does, so the launch's teardown
still removes what it started."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infergate.deploy.executor import Deployment
from infergate.deploy.failure import LaunchFailed
from infergate.deploy.state import DeployOptions
from infergate.engines.registry import plan_launch
from infergate.remote.docker_api import local_engine
from infergate_lab import Lab
from infergate_lab.engine import node_io
from selftest.lab.test_deploy_lab import TP2, detected_after, lab_engines, load, run_containers

pytestmark = [pytest.mark.lab, pytest.mark.timeout(600)]

STARTED = "node2 (10.251.0.12): started"


class Relay:
    """A unix socket that passes every connection on to TARGET's; `cut` ends the open ones
    (both ends shut, as a dropped SSH forward leaves them) and keeps accepting new ones."""

    def __init__(self, path: Path, target: str) -> None:
        self.path, self.target = path, target
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen()
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed: the test's end
            while True:
                near, _ = self.server.accept()
                far = socket.socket(socket.AF_UNIX)
                far.connect(self.target)
                self.open += [near, far]
                for a, b in ((near, far), (far, near)):
                    threading.Thread(target=self._pass, args=(a, b), daemon=True).start()

    @staticmethod
    def _pass(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        for end in self.open:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
        self.open = []

    def close(self) -> None:
        self.cut()
        self.server.close()


@contextlib.contextmanager
def relayed(lab: Lab, node: str, folder: Path) -> Iterator[Relay]:
    relay = Relay(folder / "engine.sock", lab.spec(node).docker_host.removeprefix("unix://"))
    try:
        yield relay
    finally:
        relay.close()


def cut_when_started(relay: Relay, said: list[str], cut_at: list[float]) -> None:
    end = time.monotonic() + 300
    while not any(STARTED in line for line in said) and time.monotonic() < end:
        time.sleep(0.2)
    time.sleep(2)  # its log and event streams open, its first lines read
    cut_at.append(time.monotonic())
    relay.cut()


def test_a_dropped_engine_connection_fails_the_launch_at_once_naming_the_node(
    engine_lab, tmp_path_factory
):
    plan = load(TP2)
    launch = plan_launch(plan, "selftest-stream-lost")
    said: list[str] = []
    cut_at: list[float] = []
    folder = tmp_path_factory.mktemp("relay", numbered=True)
    with relayed(engine_lab, "node2", folder) as relay:
        engines = {**lab_engines(engine_lab), "node2": local_engine(f"unix://{relay.path}")}
        cutter = threading.Thread(target=cut_when_started, args=(relay, said, cut_at))
        cutter.start()
        nodes = {n.name: n for n in plan.nodes}
        options = DeployOptions(engines=engines)
        with Deployment(launch, nodes, node_io(engine_lab), said.append, options) as d:
            with pytest.raises(LaunchFailed) as failed:
                d.perform()
            failed_at = time.monotonic()
        cutter.join()
    message = str(failed.value)
    assert cut_at, "node2 never started"
    assert failed_at - cut_at[0] < 10, message
    assert detected_after(message) < 300, message  # the first start came within it
    assert "no `" not in message, "judged as a gate's deadline, not as the lost stream"
    assert "node2 (10.251.0.12): 1 problem(s)" in message
    assert "stream of" in message, message
    assert "systemctl status docker" in message
    assert "ssh -O check node2" in message
    assert run_containers(engine_lab) == {}
