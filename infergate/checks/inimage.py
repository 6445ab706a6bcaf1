"""In-image facts: one container per node runs scripts/in_image.py in the planned image.

The container is the engine's own (Engine.container), made through the node's Engine API;
only its command, its name and a label naming this run differ. Its sections say what the
image's own software makes of the plan. The facts that import the engine depend only on the
image, the model's config and the plan: each node caches them (docs/checks.md#in-image-probe).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import replace
from importlib.resources import files
from typing import Any

from infergate.checks.collective import Size, Sweep, latency, parse_sweep_lines
from infergate.checks.cuda import CudaVersion, parse_cuda_version, parse_cuda_version_json
from infergate.checks.nccl import (
    AllReduce,
    DistRun,
    check_rendezvous,
    failures_in,
    parse_torchrun_log,
)
from infergate.checks.probe import Section
from infergate.engines.container import ContainerSpec
from infergate.engines.engine import Engine
from infergate.plan.model import Inventory
from infergate.problems import Problem

SCRIPT = files("infergate.checks").joinpath("scripts/in_image.py").read_text()

CACHE_DIR = '"$HOME/.cache/infergate/in-image"'
# the sections a cache hit skips: those that import the engine or transformers
CACHED = ("versions", "model-config", "registry", "flags", "chat-template")
# the model files beside config.json that the chat-template fact reads: in the cache key
TOKENIZER_FILES = ("tokenizer_config.json", "chat_template.jinja")


def probe_command(args: list[str], master: dict[str, str], facts: str) -> list[str]:
    """The probe container's command: scripts/in_image.py with ARGS (Engine.probe's argument,
    model path, rank, world, deadline, flags) and FACTS `fresh` or `cached`; MASTER (address,
    sweep size) is set by `env` in it: the container is the launch's, only its command not."""
    engine, model, rank, world, deadline, *flags = args
    rendezvous = [f"{key}={value}" for key, value in sorted(master.items())]
    script = [SCRIPT, engine, model, rank, world, deadline, facts, *flags]
    return ["env", *rendezvous, "python3", "-c", *script]


def cache_lookup_command(spec: ContainerSpec, image_id: str, args: list[str], reuse: bool) -> str:
    """The node's shell command that names this probe's cache entry and, with REUSE, prints it
    when there is one: a first line `KEY true|false`, then the cached sections. The key covers
    all the cached facts depend on (docs/checks.md#in-image-probe)."""
    engine, model, _rank, _world, _deadline, *flags = args
    options = [spec.gpus, spec.rdma, list(spec.mounts), list(spec.docker_args)]
    plan = _sha256(json.dumps([SCRIPT, engine, model, flags, options]))
    config = shlex.join(f"{model}/{name}" for name in ("config.json", *TOKENIZER_FILES))
    hit = '[ -s "$cache" ]' if reuse else "false"
    lines = [
        f"key=$({{ echo {shlex.quote(image_id)}; cat {config} 2>/dev/null; echo {plan}; }} "
        "| sha256sum | cut -c1-32)",
        f"cache={CACHE_DIR}/$key",
        f'if {hit}; then echo "$key true"; cat "$cache"; else echo "$key false"; fi',
    ]
    return "\n".join(lines)


def parse_cache_lookup(stdout: str) -> tuple[str, bool, str]:
    """(key, hit, the cached sections' text) from cache_lookup_command's output, e.g.
    ``0123...cdef false``, or on a hit that line and the stored sections after it."""
    first, _, cached = stdout.partition("\n")
    key, _, hit = first.strip().partition(" ")
    return key, hit == "true", cached if hit == "true" else ""


def facts_cache_section(key: str, hit: bool) -> str:
    """The `facts-cache` section that follows the probe's own output: its key, hit or not."""
    return f"\n@@@ facts-cache 0\n{json.dumps({'key': key, 'hit': hit})}\n"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def cache_write_command(sections: dict[str, Section]) -> str | None:
    """The shell command that stores a fresh run's engine facts in the node's cache, or None
    when there is nothing to store: a hit, or a fact that failed (it is read again)."""
    said = body(sections.get("facts-cache"))
    key = str(said.get("key", ""))
    if said.get("hit") is not False or not re.fullmatch(r"[0-9a-f]{32}", key):
        return None
    if any(name not in sections or sections[name].rc for name in CACHED):
        return None
    text = "".join(f"\n@@@ {name} 0\n{sections[name].text}\n" for name in CACHED)
    tmp = f"{CACHE_DIR}/{key}.$$"
    return (
        f"mkdir -p {CACHE_DIR} && printf %s {shlex.quote(text)} > {tmp} "
        f"&& mv {tmp} {CACHE_DIR}/{key}"
    )


def body(section: Section | None) -> dict[str, Any]:
    """A section's JSON body; a missing section reads as an error saying so."""
    if section is None:
        return {"error": "the probe did not get this far (container failed to start?)"}
    try:
        doc = json.loads(section.text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": section.text.strip()[-500:] or "no output"}
    return doc if isinstance(doc, dict) else {"error": f"unexpected {doc!r}"}


def check_model_supported(
    config: dict[str, Any], registry: dict[str, Any], engine: Engine
) -> list[Problem]:
    """The image's transformers reads the model's config, and its engine knows the architecture."""
    kind = engine.kind
    if "error" in config:
        return [
            Problem(
                found=f"the image's transformers cannot read config.json: {config['error'][:300]}",
                planned="a transformers that knows this model type",
                remedy="build a derived image with a newer transformers "
                "(`FROM <image>` + `RUN pip install -U transformers`), copy it to every node "
                "(for Qwen3.5, transformers 4.57 -> 5.x was enough)",
            )
        ]
    archs = config.get("architectures") or []
    if "error" in registry:
        return [
            Problem(
                found=f"cannot read the {kind} model registry: {registry['error'][:300]}",
                planned=f"{kind} importable in the image",
                remedy="check the engine's install in the image: `python3 -c 'import "
                + engine.package
                + "'`",
            )
        ]
    known = set(registry.get("archs", []))
    unknown = [a for a in archs if a not in known]
    if not unknown:
        return []
    logged = registry.get("first_warnings") or []
    if not known:
        said = f": {logged[0]}" if logged else ""
        return [
            Problem(
                found=f"the {kind} model registry in the image lists no architecture at all; "
                f"loading it logged {registry.get('warnings', 0)} warning(s){said}",
                planned=f"{kind}'s model modules importable in the image, {unknown[0]} among them",
                remedy="the image's engine install is incomplete (a model module's import "
                "fails): install what the warning names in a derived image, or use the "
                "engine's released image",
            )
        ]
    return [
        Problem(
            found=f"{kind} in the image does not support {', '.join(unknown)}"
            + (f" (loading its registry logged: {logged[0]})" if logged else ""),
            planned=f"an engine version that serves {', '.join(archs)}",
            remedy=f"use an image with a {kind} release that lists {unknown[0]} "
            "(its model registry), or a model the image supports",
        )
    ]


def check_flags(flags: dict[str, Any], engine: Engine) -> list[Problem]:
    """Every planned flag is accepted by the engine's own parser in the image; one of the
    other engine's (Engine.foreign_flags) is named as such."""
    kind, owner = engine.kind, engine.foreign_owner
    if "error" in flags:
        error = str(flags["error"])
        no_engine = error.startswith(("ModuleNotFoundError", "ImportError"))
        remedy = (
            f"the image has no importable {kind}: check image.ref and "
            f"`python3 -c 'import {engine.package}'` in it"
            if no_engine
            else "fix engine.flags: the error names the flag"
        )
        return [
            Problem(
                found=f"the {kind} parser failed: {error[:300]}",
                planned="the planned flags parsed by the image's engine",
                remedy=remedy,
            )
        ]
    unknown = [f for f in flags.get("unknown", []) if f.startswith("-")]
    problems = []
    for flag in unknown:
        name = flag.split("=")[0]
        theirs = name in engine.foreign_flags
        problems.append(
            Problem(
                found=f"{kind} in the image rejects {flag}"
                + (f": it is a {owner} flag" if theirs else ""),
                planned=f"every engine.flags entry accepted by {kind}",
                remedy=f"remove {name} from engine.flags"
                + (f" (it belongs to {owner}, not {kind})" if theirs else "")
                + f"; `{kind} --help` in the image lists what it takes",
            )
        )
    return problems


def check_nccl_conf(nccl: dict[str, Any]) -> list[Problem]:
    """No /etc/nccl.conf in the image overrides the plan's NCCL settings."""
    if not nccl.get("present"):
        return []
    content = " ".join(str(nccl.get("content", "")).split())[:200]
    return [
        Problem(
            found=f"/etc/nccl.conf in the image: {content}",
            planned="NCCL settings from the plan's environment only",
            remedy="remove it in a derived image (`RUN rm /etc/nccl.conf`): settings like "
            "NCCL_IB_USE_INLINE=1 there froze SGLang's PyNccl warm-up "
            "(https://github.com/luxingcom/aicad-nccl-optimization/issues/1)",
        )
    ]


def parse_in_image_rendezvous(result: dict[str, Any], world: int) -> DistRun:
    """The in-image probe's `rendezvous` section (scripts/in_image.py) as the rendezvous judge
    reads a torchrun log: done when the Gloo sum is WORLD; else its error and traceback lines.

    Samples: ``{"gloo_sum": 2.0, "gloo_seconds": 0.41, "nccl_allreduce": {...}, "nccl_log":
    "... via P2P/CUMEM ..."}``; ``{"error": "RuntimeError: [enforce fail at ...] Unable to
    find address for: ib9", "trace": "Traceback ..."}``; ``{"error": "no rendezvous within
    20 s"}`` (selftest/data/h200-device/inimage-*.txt)."""
    done = "error" not in result and result.get("gloo_sum") == world
    said = [str(result["error"])] if "error" in result else []
    if not done and not said:
        said = [f"Gloo all-reduce sum {result.get('gloo_sum')} instead of {world}"]
    lines = [*said, *str(result.get("trace", "")).splitlines()]
    log = parse_torchrun_log(str(result.get("nccl_log", "")))
    return replace(
        log,
        allreduce=nccl_allreduce(result),
        failures=failures_in(lines),
        exit_code=0 if done else 1,
        tail=tuple(said),
    )


def check_all_reduce(result: dict[str, Any], world: int, deadline: float) -> list[Problem]:
    """The all-reduce across every node completed within its deadline with the right sum:
    the probe's section judged as the recorded torchrun runs are (nccl.check_rendezvous)."""
    planned = f"an all-reduce across every node within {deadline:g} s, with the plan's env"
    return check_rendezvous(parse_in_image_rendezvous(result, world), planned)


def image_cuda_version(cuda: dict[str, Any]) -> CudaVersion | None:
    """The CUDA the image was built for: /usr/local/cuda/version.json, else $CUDA_VERSION."""
    doc = cuda.get("version_json")
    if isinstance(doc, dict):
        version = parse_cuda_version_json(json.dumps(doc))
        if version:
            return version
    env = cuda.get("CUDA_VERSION")
    return parse_cuda_version(env) if isinstance(env, str) and env else None


def expected_transport(inventory: Inventory) -> str:
    """NET/IB where the plan names HCAs, sockets across nodes without them, P2P within one."""
    if any(n.fabric.hcas for n in inventory.nodes):
        return "NET/IB"
    return "NET/Socket" if len(inventory.nodes) > 1 else "P2P"


def nccl_allreduce(result: dict[str, Any]) -> AllReduce | None:
    """The rendezvous's NCCL all-reduce timing, as nccl-tests reports it."""
    doc = result.get("nccl_allreduce")
    return AllReduce(**doc) if isinstance(doc, dict) else None


def collective_sweep(result: dict[str, Any]) -> Sweep | None:
    """The rendezvous's all-reduce sweep (NCCL on a GPU, else Gloo), one line per size; a
    probe of before the sweep timed one size (128 MiB), its sum not checked."""
    lines = result.get("sweep")
    if isinstance(lines, list):
        return parse_sweep_lines([str(line) for line in lines])
    one = nccl_allreduce(result)
    if one is None:
        return None
    size = Size(one.nbytes, one.time_ms * 1e3, one.algbw_gbps, one.busbw_gbps, None)
    return Sweep("nccl all-reduce", one.world, (size,))


def sweep_figures(result: dict[str, Any]) -> dict[str, Any]:
    """What the results keep of a node's sweep: latency at the small sizes, busbw at the
    largest, the seconds the sweep took and its lines ({}: no sweep)."""
    sweep = collective_sweep(result)
    if sweep is None:
        return {}
    largest = sweep.sizes[-1]
    return {
        "collective": sweep.collective,
        "world": sweep.world,
        "latency": latency(sweep),
        "largest_bytes": largest.nbytes,
        "busbw_gbps": largest.busbw_gbps,
        "sweep_s": result.get("sweep_s"),
        "stopped": sweep.stopped,
        "lines": result.get("sweep"),
    }
