"""The launch watch before and after the Engine API's streams, side by side in one run on the
lab: (a) the controller's CPU seconds per node per minute while watching, (b) the seconds
from a worker container's death (`docker kill` on its node) to the watch seeing it.

Before: the old poll, kept here as the baseline (infergate.deploy.watch.poll_command until
issue 13): one SSH round trip per node per second, over the node's SSH master as the suite's
Remote runs it, of `docker inspect`, `docker logs | tail -n +N` and the dmesg grep. After:
each node's Docker Engine API over the same SSH master (docker_api.node_engine), its log and
event streams (deploy.streams) into one queue that the watch waits on, as the deploy handle
does.

Both watch the same containers: one per lab node, in the lab's engine image, logging 10 lines
a second as a loading engine does, labelled `infergate.bench=ID` (never a run's label) and
removed at the end. The controller's CPU is this process's (its threads), its children's
(every ssh client) and the SSH masters' (they carry every byte of both). The death is timed
from the container's own FinishedAt (the lab's nodes share this machine's clock) to the
moment each watch, running at once, sees it exited.

Run it through the lab lock (it starts containers on the nodes):

    flock /tmp/infergate-lab.lock .venv/bin/python scripts/bench_watch.py [--minutes 1] [--kills 5]
"""

from __future__ import annotations

import argparse
import contextlib
import re
import resource
import secrets
import shlex
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from bench_timing import proc_cpu_seconds
from docker import DockerClient

from infergate.deploy.streams import Streams
from infergate.deploy.watch import NodeWatch, apply_event, apply_inspect, parse_oom_kills
from infergate.plan.loader import load_plan
from infergate.plan.model import Inventory, Node
from infergate.remote.docker_api import node_engine
from infergate.remote.ssh_config import plan_ssh_config

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "inventories" / "lab-moe-tp2.yaml"
IMAGE = "infergate-lab/vllm-cpu:0.32.0"
LABEL = "infergate.bench"
# a loading engine's log: a line every 1/RATE s (vLLM logs a few a second while it starts,
# then little while it loads; tqdm's bars are one line each)
TALKER = "import sys, time\nwhile True:\n    print('INFO loading', time.time(), flush=True)\n" + (
    "    time.sleep(1 / float(sys.argv[1]))"
)
POLL_S = 1.0  # the old watch's period
SSH_S = 30.0

# --- before: the old poll, as the deploy handle ran it until the streams ----------------------

LOG_MARK = "::infergate-log::"
OOM_MARK = "::infergate-oom::"


def poll_command(watch: NodeWatch) -> str:
    """One round trip: the container's state, the log lines not seen yet, and the kernel's
    OOM kills inside the container (`dmesg` names its cgroup, hence its ID)."""
    c = shlex.quote(watch.container)
    state = "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}"
    kid = shlex.quote(watch.container_id)
    oom = f"; echo {OOM_MARK}; dmesg 2>/dev/null | grep -E 'oom-kill:.*task_memcg=[^,]*'{kid}"
    return (
        f"docker inspect -f '{state}' {c} 2>/dev/null || echo missing; echo {LOG_MARK}; "
        f"docker logs {c} 2>&1 | tail -n +{len(watch.lines) + 1}{oom}"
    )


def apply_poll(watch: NodeWatch, text: str) -> None:
    text, _, oom = text.partition(OOM_MARK + "\n")
    watch.oom_kills = parse_oom_kills(oom) or watch.oom_kills
    head, _, logs = text.partition(LOG_MARK + "\n")
    fields = head.split()
    if fields[:1] == ["missing"] or len(fields) < 3:
        watch.state = "missing"
    else:
        watch.state, watch.exit_code = fields[0], int(fields[1])
        watch.oom_killed = fields[2] == "true"
    new = logs.split("\n")
    if new[-1] == "":
        new.pop()
    watch.lines += new


def over_ssh(config: Path, node: Node, command: str) -> str:
    """COMMAND on NODE over its SSH master, as the suite's Remote runs it."""
    argv = ["ssh", "-F", str(config), "-T", "--", node.name, command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=SSH_S, check=False).stdout


class PollWatch:
    def __init__(self, config: Path, nodes: list[Node], containers: dict[str, tuple[str, str]]):
        self.config, self.nodes = config, nodes
        self.watches = {
            n.name: NodeWatch(containers[n.name][0], containers[n.name][1], True, "running")
            for n in nodes
        }
        self.pool = ThreadPoolExecutor(len(nodes))

    def look(self) -> None:
        def poll(node: Node) -> None:
            watch = self.watches[node.name]
            apply_poll(watch, over_ssh(self.config, node, poll_command(watch)))

        list(self.pool.map(poll, self.nodes))

    def run(self, until: threading.Event, seen: dict[str, float]) -> None:
        while not until.is_set():
            self.look()
            record_dead(self.watches, seen)
            until.wait(POLL_S)


# --- after: the streams -----------------------------------------------------------------------


class StreamWatch:
    def __init__(self, engines: dict[str, DockerClient], bench: str, names: dict[str, str]):
        self.streams = Streams()
        self.watches = {n: NodeWatch(name, started=True) for n, name in names.items()}
        for node, engine in engines.items():
            self.streams.follow_events(node, engine, f"{LABEL}={bench}")
        for node, engine in engines.items():
            container = engine.containers.get(names[node])
            apply_inspect(self.watches[node], container.attrs)
            self.streams.follow_log(node, container)

    def run(self, until: threading.Event, seen: dict[str, float]) -> None:
        while not until.is_set():
            for news in self.streams.wait(POLL_S):
                watch = self.watches[news.node]
                if news.line is None:
                    apply_event(watch, news.event)
                else:
                    watch.lines.append(news.line)
            record_dead(self.watches, seen)
        self.streams.close()


def record_dead(watches: dict[str, NodeWatch], seen: dict[str, float]) -> None:
    for node, watch in watches.items():
        if watch.state != "running" and node not in seen:
            seen[node] = time.time()


# --- the measurement ----------------------------------------------------------------------------


def masters(config: Path, nodes: list[Node]) -> list[int]:
    pids = []
    for node in nodes:
        done = subprocess.run(
            ["ssh", "-F", str(config), "-O", "check", node.name],
            capture_output=True,
            text=True,
            check=False,
        )
        found = re.search(r"pid=(\d+)", done.stderr)
        if found:
            pids.append(int(found.group(1)))
    return pids


def cpu_s(master_pids: list[int]) -> tuple[float, float, float]:
    """CPU seconds so far: this process's, its children's (the ssh clients), the masters'."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    masters = 0.0
    for pid in master_pids:
        masters += proc_cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), reaped=False)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime, masters


def start_talkers(
    engines: dict[str, DockerClient], bench: str, rate: float = 1.0
) -> dict[str, tuple[str, str]]:
    """One talking container per node, RATE lines a second: its name and ID."""
    started = {}
    for node, engine in engines.items():
        name = f"infergate-bench-{node}-{bench}"
        command = ["python3", "-c", TALKER, str(rate)]
        container = engine.containers.create(
            IMAGE, entrypoint=command, name=name, labels={LABEL: bench}
        )
        container.start()
        started[node] = (name, container.id or "")
    return started


def remove_bench(engines: dict[str, DockerClient], bench: str) -> None:
    for engine in engines.values():
        for c in engine.containers.list(all=True, filters={"label": f"{LABEL}={bench}"}):
            c.remove(force=True)


def cpu_per_node_minute(
    watch: PollWatch | StreamWatch, seconds: float, pids: list[int]
) -> tuple[float, ...]:
    """CPU seconds per node per minute while WATCH runs: in all, and as cpu_s splits it."""
    until, seen = threading.Event(), {}
    before = cpu_s(pids)
    thread = threading.Thread(target=watch.run, args=(until, seen))
    thread.start()
    time.sleep(seconds)
    until.set()
    thread.join()
    after, per = cpu_s(pids), len(watch.watches) * seconds / 60
    parts = [(b - a) / per for a, b in zip(before, after, strict=True)]
    return (sum(parts), *parts)


def cpu_both(
    config: Path, nodes: list[Node], engines: dict[str, DockerClient], seconds: float, rate: float
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(poll, streams) CPU per node per minute, watching talkers of RATE lines a second."""
    pids = masters(config, nodes)
    bench = secrets.token_hex(6)
    try:
        started = start_talkers(engines, bench, rate)
        names = {n: s[0] for n, s in started.items()}
        poll = cpu_per_node_minute(PollWatch(config, nodes, started), seconds, pids)
        return poll, cpu_per_node_minute(StreamWatch(engines, bench, names), seconds, pids)
    finally:
        remove_bench(engines, bench)


def death_to_seen(
    config: Path, nodes: list[Node], engines: dict[str, DockerClient], victim: Node
) -> tuple[float, float]:
    """Kill VICTIM's container with both watches on; the seconds each took to see it."""
    bench = secrets.token_hex(6)
    try:
        started = start_talkers(engines, bench)
        time.sleep(2)  # both watches settled on a running container
        poll, stream = (
            PollWatch(config, nodes, started),
            StreamWatch(engines, bench, {n: s[0] for n, s in started.items()}),
        )
        until, by_poll, by_stream = threading.Event(), {}, {}
        threads = [
            threading.Thread(target=poll.run, args=(until, by_poll)),
            threading.Thread(target=stream.run, args=(until, by_stream)),
        ]
        for t in threads:
            t.start()
        time.sleep(1.5)
        over_ssh(config, victim, f"docker kill {started[victim.name][0]}")
        end = time.monotonic() + 10
        while victim.name not in by_poll or victim.name not in by_stream:
            if time.monotonic() > end:
                raise SystemExit(f"a watch missed the death: poll {by_poll}, stream {by_stream}")
            time.sleep(0.05)
        until.set()
        for t in threads:
            t.join()
        died = engines[victim.name].containers.get(started[victim.name][1]).attrs
        at = datetime.fromisoformat(died["State"]["FinishedAt"][:26] + "+00:00").timestamp()
        return by_poll[victim.name] - at, by_stream[victim.name] - at
    finally:
        remove_bench(engines, bench)


@contextlib.contextmanager
def lab_engines(inventory: Inventory, config: Path) -> Iterator[dict[str, DockerClient]]:
    with tempfile.TemporaryDirectory(prefix="ig-bench-") as tmp, contextlib.ExitStack() as stack:
        yield {
            n.name: stack.enter_context(node_engine(n, config, Path(tmp))) for n in inventory.nodes
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=1.0, help="per watch, for the CPU")
    parser.add_argument(
        "--rates",
        type=float,
        nargs="+",
        default=[1.0, 10.0],
        help="log lines a second of each node's container",
    )
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    inventory = load_plan(PLAN)
    config = plan_ssh_config(inventory, PLAN, None)
    with lab_engines(inventory, config) as engines:
        cpu = {
            r: cpu_both(config, inventory.nodes, engines, args.minutes * 60, r) for r in args.rates
        }
        victim = inventory.nodes[-1]  # a worker
        deaths = [
            death_to_seen(config, inventory.nodes, engines, victim) for _ in range(args.kills)
        ]
    print(
        f"(a) controller CPU while watching {len(inventory.nodes)} nodes, s per node per "
        f"minute ({args.minutes:g} min each; in all = this process + ssh clients + SSH "
        "masters):"
    )
    for rate, (poll, stream) in cpu.items():
        print(
            f"    {rate:g} log line(s)/s per node: poll {_cpu(poll)}, streams {_cpu(stream)}: "
            f"{poll[0] / stream[0]:.1f}x less"
        )
    poll_s = statistics.median(d[0] for d in deaths)
    stream_s = statistics.median(d[1] for d in deaths)
    print(
        f"(b) a worker container's death (docker kill on {victim.name}) to the watch seeing "
        f"it, median of {args.kills}: poll {poll_s:.3f} s, streams {stream_s:.3f} s: "
        f"{poll_s / max(stream_s, 1e-3):.0f}x sooner"
    )
    each = ", ".join(f"({p:.3f}, {s:.3f})" for p, s in deaths)
    print(f"    each kill (poll s, streams s): {each}")


def _cpu(parts: tuple[float, ...]) -> str:
    return "{:.3f} ({:.3f} + {:.3f} + {:.3f})".format(*parts)


if __name__ == "__main__":
    main()
