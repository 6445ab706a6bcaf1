"""Our load measurement against `vllm bench serve`: the same prompts, the same server, the same
node, side by side in one run; prints, per concurrency level, output tokens/s and median TTFT
of each and their ratio, and each client's own CPU cost per 1,000 streamed tokens.

    python scripts/bench_inference.py [--levels 1,4,16,64] [--rounds 5] [--input-tokens 128]
                                      [--output-tokens 32] [--min-requests 32]
                                      [--server alone|plan] [--inventory inventories/lab.yaml]

Needs the lab with its engine (`python -m infergate_lab up && python -m infergate_lab
engine`); run it under the lab's lock. The server (removed at the end, on Ctrl-C and SIGTERM
too):
- `alone` (the default): SmolLM2 served by one `vllm serve` on the head node, held to all the
  machine's cores but the last (`docker run --cpuset-cpus`), and both clients held to that
  last core. A client that shares its cores with the engine takes CPU from it in its own
  pattern, so each side may meet a server of another speed. On the lab's PP 2 deployment,
  clients unpinned, our c = 16 TPOT read 48.1 ms against vLLM's 42.9 ms, with more start
  bursts; served alone and held apart (both changed at once), 47.1 against 48.2 ms, and the
  start bursts matched.
- `plan`: the plan deployed (or the server already answering on the head), clients unpinned.
It warms the server up, then builds every run's prompts at once with the served model's
tokenizer (infergate.inference.workload.build_prompts: random tokens, exact lengths, no shared
prefix) and writes each run's set as a ShareGPT JSON file. Per level and round, one after the
other, each in a container of the lab image on the last node (host network): our client (this
script, this checkout mounted) and `vllm bench serve` read their run's file (vLLM:
`--dataset-name sharegpt --disable-shuffle --sharegpt-output-len N --ignore-eos`), no
request-rate limit, `--max-concurrency` = the level.
Every run has prompts of its own, so that neither side is served from the prefix cache the
other filled. vLLM's one-request ready check is skipped (`--ready-check-timeout-sec 0`): it
would send its run's first prompt twice. Medians over the rounds; the order alternates so
that drift of the shared cores favours neither. PASS: both ratios within ±5 %.

The CPU cost: each side runs as the child of a small stdlib wrapper (CPU_OF) in its container,
which reads the child's utime + stime from /proc/PID/stat when the child prints the line that
starts its load (ours: LOAD_STARTS; vLLM's benchmark() prints "Starting main benchmark
run...", vllm/benchmarks/serve.py), and its total from getrusage(RUSAGE_CHILDREN) at exit.
The load's share (total minus that) over the run's output tokens is the figure compared;
the total includes each side's start-up (vLLM's imports torch, ours does not).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import signal
import statistics
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from infergate.deploy.api import http_get
from infergate.deploy.executor import Deployment
from infergate.deploy.state import DeployOptions
from infergate.engines.registry import plan_launch
from infergate.inference.load import run_load
from infergate.inference.metrics import summarize
from infergate.inference.plan import CHAT_PATH
from infergate.inference.workload import Prompt, build_prompts, chat_bodies, dataset_prompts
from infergate.plan.loader import load_plan
from infergate.plan.model import Inventory
from infergate_lab import Lab
from infergate_lab.engine import node_io, serving_alone
from infergate_lab.layout import MODELS_MOUNTPOINT, SMOLLM2

ROOT = Path(__file__).resolve().parents[1]
LOAD_STARTS = "::infergate-load-starts::"
VLLM_LOAD_STARTS = "Starting main benchmark run..."
RUN_TIMEOUT_S = 900  # one side's run of one level; a request's own deadline is REQUEST_S
REQUEST_S = 600
WAVES = 4  # requests per level: at least 4x the concurrency, so that most run in steady state
SEED = 14
SERVED, PORT, SERVER = "smollm2-135m", 18436, "infergate-bench-server"  # --server alone
WARMUP = 16  # requests at c=16 before the first run: compiled kernels, filled pools

# Runs argv as its child; prints one JSON line: its exit status, its stdout, its CPU seconds
# (user + system) at exit and when it printed the line starting with argv[1]. Stdlib only:
# it runs with the node's python and in the vLLM image.
CPU_OF = r"""
import json, os, resource, subprocess, sys
mark, argv = sys.argv[1], sys.argv[2:]
child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
at_mark, out = None, []
for line in child.stdout:
    if at_mark is None and line.startswith(mark):
        stat = open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()
        at_mark = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    out.append(line)
rc = child.wait()
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "stdout": "".join(out), "cpu_s": used.ru_utime + used.ru_stime,
                  "cpu_at_mark_s": at_mark}))
"""


@dataclass(frozen=True)
class Run:
    """One side's run of one level."""

    tok_s: float
    ttft_ms: float
    tpot_ms: float
    tokens: int
    cpu_s: float  # the whole process
    load_cpu_s: float  # from the line that starts its load to its exit
    starts: tuple[float, ...]  # each request's start, seconds (any origin)

    @property
    def cpu_per_1k(self) -> float:
        return 1000 * self.load_cpu_s / self.tokens


def ours(spec: dict[str, str | int]) -> None:
    """Our client, as the node runs it (the child of CPU_OF): the run's prompt file, the
    level's concurrency, the figures as one JSON line."""
    prompts = dataset_prompts(
        str(spec["dataset"]), int(spec["requests"]), int(spec["output_tokens"])
    )
    bodies = chat_bodies(prompts, str(spec["model"]))
    print(LOAD_STARTS, flush=True)
    run = run_load(f"{spec['base']}/v1", CHAT_PATH, bodies, int(spec["level"]), REQUEST_S)
    s = summarize(run)
    if s.failed:
        sys.exit(f"our run had {s.failed} failed requests: {s.errors}")
    print(
        json.dumps(
            {
                "tok_s": s.output_throughput,
                "ttft_ms": s.ttft.median_ms,
                "tpot_ms": s.tpot.median_ms,
                "tokens": s.total_output_tokens,
                "starts": [r.start_s for r in run.records],
            }
        )
    )


def in_image(
    lab: Lab, node: str, plan: Inventory, mark: str, argv: list[str], options: list[str]
) -> tuple[str, float, float]:
    """ARGV as the child of CPU_OF, in a container of the plan's image on the node (host
    network, `docker run OPTIONS`): its stdout, its CPU seconds in all and from MARK on.
    Both clients run so, in the same cgroup placement and on the same interpreter."""
    name = f"infergate-bench-{secrets.token_hex(3)}"
    docker = [
        "docker",
        "run",
        "--rm",
        "--name",
        name,
        "--network",
        "host",
        "--entrypoint=",
        *options,
        plan.image.ref,
        "python3",
        "-c",
        CPU_OF,
        mark,
        *argv,
    ]
    try:
        done = lab.node_exec(node, docker, timeout=RUN_TIMEOUT_S, check=False)
    finally:  # a run cut short (Ctrl-C, the timeout) leaves no container behind
        lab.node_exec(node, ["docker", "rm", "-f", name], timeout=60, check=False)
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        sys.exit(f"{argv[0]} on {node} gave no report:\n{done.stderr[-3000:]}")
    if report["rc"] != 0 or report["cpu_at_mark_s"] is None:
        sys.exit(
            f"{argv[0]} on {node} exited {report['rc']} before or during its load:\n"
            f"{report['stdout'][-2000:]}\n{done.stderr[-3000:]}"
        )
    return report["stdout"], report["cpu_s"], report["cpu_s"] - report["cpu_at_mark_s"]


@dataclass(frozen=True)
class Server:
    """What both clients are pointed at, and where they run."""

    base: str  # http://HOST:PORT
    served_name: str
    tokenizer: str  # the model's directory on the nodes, for vLLM's client
    client_options: tuple[str, ...]  # `docker run` options of both clients' containers


def run_ours(
    lab: Lab, node: str, plan: Inventory, spec: dict[str, str | int], server: Server
) -> Run:
    """This script in the image with this checkout and its virtualenv's packages mounted
    (PYTHONPATH, before the image's own: the venv's editable installs are .pth files, which
    it does not read)."""
    packages = sysconfig.get_paths()["purelib"]
    data = Path(str(spec["dataset"])).parent
    options = [
        "-v",
        f"{ROOT}:{ROOT}:ro",
        "-v",
        f"{packages}:{packages}:ro",
        "-v",
        f"{data}:{data}:ro",
        *server.client_options,
        "-e",
        f"PYTHONPATH={ROOT}:{ROOT / 'lab'}:{packages}",
    ]
    argv = ["python3", __file__, "--ours-json", json.dumps(spec)]
    stdout, cpu, load_cpu = in_image(lab, node, plan, LOAD_STARTS, argv, options)
    r = json.loads(stdout.strip().splitlines()[-1])
    starts = tuple(r["starts"])
    return Run(r["tok_s"], r["ttft_ms"], r["tpot_ms"], r["tokens"], cpu, load_cpu, starts)


def run_vllm(
    lab: Lab, node: str, plan: Inventory, spec: dict[str, str | int], server: Server
) -> Run:
    """`vllm bench serve`, reading the run's ShareGPT file (its `custom` JSONL loader needs
    pandas, which the image lacks; ShareGPT takes the first two turns,
    vllm/benchmarks/datasets/datasets.py ShareGPTDataset)."""
    dataset = Path(str(spec["dataset"]))
    result = f"{dataset.stem}.result.json"
    bench = [
        "vllm",
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        spec["base"],
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        spec["model"],
        "--tokenizer",
        server.tokenizer,
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(dataset),
        "--disable-shuffle",
        "--sharegpt-output-len",
        spec["output_tokens"],
        "--num-prompts",
        spec["requests"],
        "--max-concurrency",
        spec["level"],
        "--ignore-eos",
        "--disable-tqdm",
        "--num-warmups",
        "0",
        "--ready-check-timeout-sec",
        "0",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(dataset.parent),
        "--result-filename",
        result,
    ]
    model = server.tokenizer
    options = [
        "-v",
        f"{model}:{model}:ro",
        "-v",
        f"{dataset.parent}:{dataset.parent}",
        *server.client_options,
    ]
    _, cpu, load_cpu = in_image(lab, node, plan, VLLM_LOAD_STARTS, list(map(str, bench)), options)
    r = json.loads((dataset.parent / result).read_text())
    return Run(
        r["output_throughput"],
        r["median_ttft_ms"],
        r["median_tpot_ms"],
        r["total_output_tokens"],
        cpu,
        load_cpu,
        tuple(r["start_times"]),
    )


def requests_at(level: int, floor: int) -> int:
    return max(floor, WAVES * level)


def write_sharegpt(path: Path, prompts: Sequence[Prompt]) -> None:
    """The form vLLM's ShareGPTDataset reads: a human turn (the prompt), a gpt turn (its
    length is overridden by --sharegpt-output-len)."""
    items = [
        {"conversations": [{"from": "human", "value": p.text}, {"from": "gpt", "value": "ok"}]}
        for p in prompts
    ]
    path.write_text(json.dumps(items))


@contextmanager
def served(lab: Lab, plan: Inventory, how: str) -> Iterator[Server]:
    """The server for the bench's lifetime (see the module's doc)."""
    if how == "alone":
        cores = sorted(os.sched_getaffinity(0))  # the lab's nodes share this machine's cores
        if len(cores) < 2:
            sys.exit(f"--server alone holds the server and the clients apart: {len(cores)} core")
        engine = ["--cpuset-cpus", ",".join(map(str, cores[:-1]))]
        with serving_alone(lab, plan.head.name, SERVED, PORT, SERVER, options=engine) as base:
            tokenizer = f"{MODELS_MOUNTPOINT}/{SMOLLM2}"
            yield Server(base, SERVED, tokenizer, ("--cpuset-cpus", str(cores[-1])))
        return
    base = f"http://{plan.head.address}:{plan.engine.api_port}"
    server = Server(base, plan.model.served_name, plan.model.path, ())
    if http_get(f"{base}/health", 5).status == 200:
        yield server
        return
    launch = plan_launch(plan, f"bench-{secrets.token_hex(3)}")
    nodes = {n.name: n for n in plan.nodes}
    options = DeployOptions(engines={n: lab.engine(n) for n in nodes})
    with Deployment(launch, nodes, node_io(lab), print, options) as deployment:
        deployment.perform()
        yield server


def bursts(starts: Sequence[float], gap_s: float = 0.02) -> int:
    """Groups of request starts closer than GAP_S: at concurrency c, n requests of equal
    lengths started together stay in n/c waves; a client slow to start the next request
    spreads them, and the server then batches prefills and decodes differently."""
    ordered = sorted(starts)
    return 1 + sum(b - a > gap_s for a, b in itertools.pairwise(ordered))


def median(runs: Sequence[Run], key: str) -> float:
    return statistics.median(getattr(r, key) for r in runs)


def verdict(*ratios: float) -> str:
    return "PASS" if all(abs(r - 1) <= 0.05 for r in ratios) else "DIFF"


HEADER = (
    f"{'level':>5} {'reqs':>5} {'ours tok/s':>10} {'vllm tok/s':>10} {'ratio':>6} "
    f"{'ours TTFT':>10} {'vllm TTFT':>10} {'ratio':>6} {'ours CPU':>9} {'vllm CPU':>9}  "
    f"±5 %"
)


def spread(runs: Sequence[Run]) -> str:
    """How far one side's rounds lie apart: (max - min) / median of tok/s, the noise that a
    ratio of medians has to be judged against."""
    rates = [r.tok_s for r in runs]
    return f"{(max(rates) - min(rates)) / statistics.median(rates):.0%}"


def report_level(level: int, requests: int, mine: list[Run], theirs: list[Run]) -> bool:
    a, b = median(mine, "tok_s"), median(theirs, "tok_s")
    c, d = median(mine, "ttft_ms"), median(theirs, "ttft_ms")
    e, f = median(mine, "cpu_per_1k"), median(theirs, "cpu_per_1k")
    word = verdict(a / b, c / d)
    print(
        f"{level:>5} {requests:>5} {a:>10.1f} {b:>10.1f} {a / b:>6.3f} {c:>8.1f}ms "
        f"{d:>8.1f}ms {c / d:>6.3f} {e:>8.3f}s {f:>8.3f}s  {word}",
        flush=True,
    )
    print(
        f"{'':>11} runs: tok/s ours {[round(m.tok_s, 1) for m in mine]} (spread "
        f"{spread(mine)}), vllm {[round(t.tok_s, 1) for t in theirs]} (spread "
        f"{spread(theirs)}); TPOT ours {median(mine, 'tpot_ms'):.1f} ms, "
        f"vllm {median(theirs, 'tpot_ms'):.1f} ms; whole-process CPU ours "
        f"{median(mine, 'cpu_s'):.1f} s, vllm {median(theirs, 'cpu_s'):.1f} s; start bursts "
        f"ours {[bursts(m.starts) for m in mine]}, vllm {[bursts(t.starts) for t in theirs]}",
        flush=True,
    )
    return word == "PASS"


def stop_on_sigterm() -> None:
    """SIGTERM (`timeout`, a CI cancel) unwinds like Ctrl-C: the deployment is removed."""

    def stop(signum: int, _frame: object) -> NoReturn:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inventory", default=str(ROOT / "inventories" / "lab.yaml"))
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--min-requests", type=int, default=32, help="per level (else 4x its c)")
    ap.add_argument("--server", choices=("alone", "plan"), default="alone")
    ap.add_argument("--ours-json", help=argparse.SUPPRESS)  # our side's run, in the node
    args = ap.parse_args()
    if args.ours_json:
        ours(json.loads(args.ours_json))
        return 0
    stop_on_sigterm()
    return bench(args, load_plan(Path(args.inventory)))


def bench(args: argparse.Namespace, plan: Inventory) -> int:
    lab, node = Lab(), plan.nodes[-1].name
    levels = [int(x) for x in args.levels.split(",")]
    counts = {c: requests_at(c, args.min_requests) for c in levels}
    total = WARMUP + 2 * args.rounds * sum(counts.values())
    print(
        f"levels {levels}, requests {list(counts.values())}, {args.rounds} rounds a side, "
        f"{args.input_tokens} input and {args.output_tokens} output tokens; {total} distinct "
        f"prompts; both clients on {node}; server: {args.server}",
        flush=True,
    )
    with ExitStack() as stack:
        server = stack.enter_context(served(lab, plan, args.server))
        data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="infergate-bench-")))
        prompts = iter(
            build_prompts(
                server.base,
                server.served_name,
                total,
                args.input_tokens,
                args.output_tokens,
                0.0,
                SEED,
            )
        )
        warm = chat_bodies([next(prompts) for _ in range(WARMUP)], server.served_name)
        run_load(f"{server.base}/v1", CHAT_PATH, warm, WARMUP, REQUEST_S)
        print(HEADER + f"  (medians of {args.rounds}; CPU: seconds per 1,000 output tokens)")
        passed = [
            level_rounds(lab, node, args, plan, server, data, prompts, c, counts[c]) for c in levels
        ]
    print("PASS: both agree within ±5 % at every level" if all(passed) else "not within ±5 %")
    return 0 if all(passed) else 1


def level_rounds(
    lab: Lab,
    node: str,
    args: argparse.Namespace,
    plan: Inventory,
    server: Server,
    data: Path,
    prompts: Iterator[Prompt],
    level: int,
    requests: int,
) -> bool:
    mine: list[Run] = []
    theirs: list[Run] = []
    for r in range(args.rounds):
        for who in ("ours", "vllm") if r % 2 == 0 else ("vllm", "ours"):
            dataset = data / f"c{level}-r{r}-{who}.json"
            write_sharegpt(dataset, [next(prompts) for _ in range(requests)])
            spec: dict[str, str | int] = {
                "base": server.base,
                "model": server.served_name,
                "dataset": str(dataset),
                "level": level,
                "requests": requests,
                "output_tokens": args.output_tokens,
            }
            if who == "ours":
                mine.append(run_ours(lab, node, plan, spec, server))
            else:
                theirs.append(run_vllm(lab, node, plan, spec, server))
    return report_level(level, requests, mine, theirs)


if __name__ == "__main__":
    sys.exit(main())
