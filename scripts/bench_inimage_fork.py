"""What forking the in-image probe would buy: its engine facts one after the other (as
scripts/in_image.py reads them) against the parser's fact in a forked child while the
parent reads the others, after the import they share, on the 2-node lab in one run.

    flock /tmp/infergate-lab.lock .venv/bin/python scripts/bench_inimage_fork.py [--repeats 5]

The script run in the lab image is in_image.py's own functions (versions, model_config,
registry, flags, chat_template) with a timed driver in place of its main: the shared import
(torch, transformers, vllm, vllm.config and vllm.engine.arg_utils, which the registry and
the parser both need), then the facts, in one process or with `flags` (`vllm serve`'s
parser, the dearest part of the facts that the registry does not share) forked. Each round
runs both forms on node1 alone (node2 idle: a spare core, as a real node has many) and on
both nodes at once (as the preflight runs them; the lab's two nodes share this machine's
two cores), the order of the two forms alternating from round to round. Prints the medians
of the facts' seconds in the container and of the wall (ssh, `docker run`, the import).
Needs the lab with its engine: `python -m infergate_lab up && python -m infergate_lab engine`.
"""

from __future__ import annotations

import argparse
import re
import shlex
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from bench_model_hash import on_node
from bench_preflight_image import PLAN

from infergate.checks.inimage import SCRIPT
from infergate_lab import Lab

MAIN = 'if __name__ == "__main__":\n    main()\n'
DRIVER = r"""
def timed_facts(form, model, planned):
    start = time.monotonic()
    import torch, transformers, vllm, vllm.config, vllm.engine.arg_utils  # noqa: F401
    imported = time.monotonic()
    if form == "forked":
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            os.write(w, json.dumps(flags("vllm_parser", "", model, planned)).encode())
            os._exit(0)
        os.close(w)
    else:
        flags("vllm_parser", "", model, planned)
    versions(("vllm",))
    model_config(model)
    registry("vllm")
    chat_template(model, planned)
    if form == "forked":
        with os.fdopen(r, "rb") as f:
            json.loads(f.read())
        os.waitpid(child, 0)
    done = time.monotonic()
    print(f"TIMED import={imported - start:.3f} facts={done - imported:.3f}", flush=True)


timed_facts(sys.argv[1], sys.argv[2], sys.argv[3:])
os._exit(0)
"""
FORMS = ("one process", "forked")
TIMED = re.compile(r"TIMED import=([\d.]+) facts=([\d.]+)")


def experiment() -> str:
    """in_image.py with the timed driver in place of its main."""
    if not SCRIPT.endswith(MAIN):
        raise SystemExit("in_image.py no longer ends by calling main(): update this bench")
    return SCRIPT[: -len(MAIN)] + DRIVER


def run(lab: Lab, node: str, form: str) -> tuple[float, float]:
    """Seconds of the facts in the container and of the whole command, FORM on NODE."""
    model = str(PLAN.model.path)
    script = [experiment(), form.split()[0], model, *PLAN.engine.flags]
    container = [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint=",
        "-e",
        "HF_HUB_OFFLINE=1",
        "-v",
        f"{model}:{model}:ro",
        PLAN.image.ref,
        "python3",
        "-c",
        *script,
    ]
    start = time.perf_counter()
    found = TIMED.search(on_node(lab, node, shlex.join(container), timeout=300))
    wall = time.perf_counter() - start
    if found is None:
        raise SystemExit(f"{node}, {form}: the experiment printed no TIMED line")
    return float(found[2]), wall


Rounds = dict[str, dict[str, list[float]]]  # "node1 alone, forked" -> facts|wall -> seconds


def measure(repeats: int) -> Rounds:
    lab = Lab()
    rounds: Rounds = {}

    def keep(case: str, figures: tuple[float, float]) -> None:
        seen = rounds.setdefault(case, {"facts": [], "wall": []})
        seen["facts"].append(figures[0])
        seen["wall"].append(figures[1])

    run(lab, "node1", "one process")  # warm-up: the image's files in the page cache
    with ThreadPoolExecutor(2) as pool:
        for i in range(repeats):
            for form in FORMS if i % 2 == 0 else FORMS[::-1]:
                keep(f"node1 alone, {form}", run(lab, "node1", form))
                both = [pool.submit(run, lab, node, form) for node in ("node1", "node2")]
                for node, future in zip(("node1", "node2"), both, strict=True):
                    keep(f"both nodes, {form} ({node})", future.result())
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    rounds = measure(repeats)
    print(
        f"\nmedians of {repeats} (seconds): the engine facts after the shared import, and the "
        "wall of ssh + docker run"
    )
    for case, seen in rounds.items():
        facts, wall = statistics.median(seen["facts"]), statistics.median(seen["wall"])
        print(f"{case:<32} facts {facts:5.2f}  wall {wall:5.2f}")


if __name__ == "__main__":
    main()
