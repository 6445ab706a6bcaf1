"""xdist workers share what one of them read from every node (PerNode made once per run
through fixtures/xdist.py's `run_once`): real processes on one shared folder, real Remotes
on this machine."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from pathlib import Path

import pytest

from infergate.fixtures.inventory import load_inventory
from infergate.fixtures.xdist import INPUT, Worker, run_once
from infergate.plan.model import Ssh
from infergate.preflight.per_node import Once, PerNode
from infergate.remote.ssh import NodeTimedOut, NodeUnreachable, Remote
from infergate.waiting import Deadline

ROOT = Path(__file__).resolve().parents[2]
NODES = [
    dataclasses.replace(n, ssh=Ssh(connection="local"))
    for n in load_inventory(ROOT / "inventories" / "lab.yaml").nodes
]
LIMIT = Deadline(5.0, "thresholds.command_timeout_s")


def remotes() -> dict[str, Remote]:
    return {n.name: Remote(n, None, 30) for n in NODES}


def once(folder: Path | None) -> Once:
    return lambda make: run_once(folder, "probes", make)


def counted_read(log: Path, slow_s: float) -> Callable[[Remote], str]:
    """A read that leaves a line in LOG per node it reads; node2's ran past its deadline."""

    def read(remote: Remote) -> str:
        with log.open("a") as f:
            f.write(f"{os.getpid()} {remote.node.name}\n")
        time.sleep(slow_s)  # the other worker asks meanwhile
        if remote.node.name == "node2":
            raise NodeTimedOut(remote.node.where, "the host probe", LIMIT, 124)
        return f"facts of {remote.node.name}"

    return read


def worker(shared: Path, log: Path, out: Queue[dict[str, tuple[str, str]]]) -> None:
    done = PerNode(remotes(), counted_read(log, 0.5), once(shared)).every()
    out.put({name: (type(o).__name__, str(o)) for name, o in done.items()})


def test_two_workers_read_every_node_once_and_see_the_same_outcomes(tmp_path: Path) -> None:
    shared, log = tmp_path, tmp_path / "reads.log"
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter each, as xdist's workers
    out = ctx.Queue()
    workers = [ctx.Process(target=worker, args=(shared, log, out)) for _ in range(2)]
    for w in workers:
        w.start()
    seen = [out.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(30)
        assert w.exitcode == 0
    reads = log.read_text().splitlines()
    assert sorted(line.split()[1] for line in reads) == ["node1", "node2"], reads
    assert len({line.split()[0] for line in reads}) == 1, "both workers read the nodes"
    assert seen[0] == seen[1]
    assert seen[0]["node1"] == ("str", "facts of node1")
    kind, message = seen[0]["node2"]
    assert kind == "NodeTimedOut"
    assert message.startswith("node2 (10.251.0.12): the host probe ran past"), message


def test_a_read_that_raised_leaves_nothing_and_the_next_reads_again(tmp_path: Path) -> None:
    def broken(remote: Remote) -> str:
        raise ValueError("a bug in the reader, not a node's failure")

    with pytest.raises(ValueError, match="a bug in the reader"):
        PerNode(remotes(), broken, once(tmp_path)).every()
    assert not (tmp_path / "probes.pickle").exists()
    done = PerNode(remotes(), lambda r: r.node.name, once(tmp_path)).every()
    assert done == {"node1": "node1", "node2": "node2"}


def test_a_timed_out_node_keeps_its_kind_and_message_through_the_shared_file(
    tmp_path: Path,
) -> None:
    log = tmp_path / "reads.log"
    first = PerNode(remotes(), counted_read(log, 0.0), once(tmp_path)).every()
    again = PerNode(remotes(), counted_read(log, 0.0), once(tmp_path)).every()
    assert len(log.read_text().splitlines()) == 2  # the second loaded what the first wrote
    for outcome in (first["node2"], again["node2"]):
        assert isinstance(outcome, NodeTimedOut)
        assert isinstance(outcome, NodeUnreachable)
    assert str(again["node2"]) == str(first["node2"])
    assert (again["node2"].limit, again["node2"].status) == (LIMIT, 124)


class Config:
    """What a worker's config carries: the workerinput xdist gives it, a stash, options."""

    def __init__(self, folder: Path) -> None:
        self.workerinput = {INPUT: {"shared": str(folder)}}
        self.stash = pytest.Stash()
        self.option = object()


def test_a_worker_on_another_host_reads_for_itself(tmp_path: Path) -> None:
    """`--tx ssh=` puts a worker on a host without the controller's folder: no shared file
    there, so its reads do not fail on a folder that is not, they are its own."""
    assert Worker(Config(tmp_path)).shared == tmp_path  # type: ignore[arg-type]
    elsewhere = Worker(Config(tmp_path / "on-the-controller-only"))  # type: ignore[arg-type]
    assert elsewhere.shared is None
    assert PerNode(remotes(), lambda r: r.node.name, once(elsewhere.shared)).every() == {
        n.name: n.name for n in NODES
    }
