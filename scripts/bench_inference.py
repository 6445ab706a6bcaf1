"""Our load measurement against `vllm bench serve`, on the same lab server with the same load,
side by side in one run; prints the ratios of output tokens/s and median TTFT per level.

    python scripts/bench_inference.py [--levels 1,4,16] [--requests 16] [--max-tokens 64]
                                      [--rounds 2] [--inventory inventories/lab.yaml]

Needs the lab with its engine (`python -m infergate_lab up && python -m infergate_lab
engine`). Deploys the plan (or uses the server already answering on the head), then per
level and round, one after the other: our client (infergate.inference, from this controller)
and `vllm bench serve` from the lab image (a container on the last node, host network), both
at http://HEAD:PORT, both sending the plan's prompt as one chat turn with `ignore_eos` and
the same max_tokens, no request-rate limit, `--max-concurrency` = the level. Medians over the
rounds; the order alternates so that drift of the shared 2 cores favours neither.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shlex
import statistics
import sys
import sysconfig
from contextlib import ExitStack
from pathlib import Path

from infergate.deploy.engines import plan_launch
from infergate.deploy.executor import Deployment, http_get
from infergate.inference.client import run_load
from infergate.inference.metrics import summarize
from infergate.inference.plan import CHAT_PATH, chat_body
from infergate.inventory import Inventory
from infergate.plan_yaml import load_plan
from infergate_lab import Lab
from infergate_lab.engine import node_io

ROOT = Path(__file__).resolve().parents[1]
MARK = "::infergate-bench-result::"


def ours_from(
    lab: Lab, node: str, inventory: str, base: str, level: int, requests: int, max_tokens: int
) -> dict[str, float]:
    """`ours`, by this same script inside that lab node's namespaces and cgroup, with the
    system python (a node has its own /root, where pyenv's interpreter lives). PYTHONPATH
    names lab/ itself: the venv's editable installs are .pth files, which it does not read."""
    path = f"PYTHONPATH={ROOT}:{ROOT / 'lab'}:{sysconfig.get_paths()['purelib']}"
    argv = ["env", path, "/usr/bin/python3", __file__, "--inventory", inventory,
            "--ours-json", f"{base},{level},{requests},{max_tokens}"]  # fmt: skip
    done = lab.node_exec(node, argv, timeout=900)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def ours(
    plan: Inventory, base: str, level: int, requests: int, max_tokens: int
) -> dict[str, float]:
    body = chat_body(plan.model.served_name, plan.inference.prompt, max_tokens, ignore_eos=True)
    s = summarize(run_load(f"{base}/v1", CHAT_PATH, [body] * requests, level, 300))
    if s.failed:
        sys.exit(f"our run had {s.failed} failed requests: {s.errors}")
    return {"tok_s": s.output_throughput, "ttft_ms": s.ttft.median_ms,
            "tpot_ms": s.tpot.median_ms, "tokens": s.total_output_tokens}  # fmt: skip


def vllm_bench(lab: Lab, plan: Inventory, base: str, level: int, requests: int,
               max_tokens: int) -> dict[str, float]:  # fmt: skip
    """`vllm bench serve` with a ShareGPT-form dataset of the plan's prompt (its `custom`
    dataset needs pandas, which the image lacks), in the lab image."""
    turns = [
        {"from": "human", "value": plan.inference.prompt},
        {"from": "gpt", "value": "ok ok ok ok"},
    ]
    data = json.dumps([{"conversations": turns}] * requests)
    bench = ["vllm", "bench", "serve", "--backend", "openai-chat", "--base-url", base,
             "--endpoint", "/v1/chat/completions", "--model", plan.model.served_name,
             "--tokenizer", plan.model.path, "--dataset-name", "sharegpt",
             "--dataset-path", "/tmp/prompts.json", "--sharegpt-output-len", str(max_tokens),
             "--num-prompts", str(requests),
             "--max-concurrency", str(level), "--ignore-eos", "--disable-tqdm",
             "--num-warmups", "0", "--save-result", "--result-dir", "/tmp",
             "--result-filename", "r.json"]  # fmt: skip
    script = (f"echo {shlex.quote(data)} > /tmp/prompts.json"
              f" && {shlex.join(bench)} >&2 && echo {MARK} && cat /tmp/r.json")  # fmt: skip
    model = plan.model.path
    docker = ["docker", "run", "--rm", "--network", "host", "--entrypoint=", "-v",
              f"{model}:{model}:ro", plan.image.ref, "sh", "-c", script]  # fmt: skip
    done = lab.ssh(plan.nodes[-1].name, [shlex.join(docker)], timeout=900)
    if MARK not in done.stdout:
        sys.exit(f"vllm bench serve failed:\n{done.stderr[-3000:]}")
    r = json.loads(done.stdout.split(MARK, 1)[1])
    return {"tok_s": r["output_throughput"], "ttft_ms": r["median_ttft_ms"],
            "tpot_ms": r["median_tpot_ms"], "tokens": r["total_output_tokens"]}  # fmt: skip


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inventory", default=str(ROOT / "inventories" / "lab.yaml"))
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--ours-from",
        metavar="NODE",
        help="run our client inside this lab node "
        "(where vllm bench serve runs: the last node) instead of the controller",
    )
    ap.add_argument("--ours-json", help=argparse.SUPPRESS)  # BASE,LEVEL,REQUESTS,MAX_TOKENS
    args = ap.parse_args()
    plan = load_plan(Path(args.inventory))
    if args.ours_json:
        base, *load = args.ours_json.split(",")
        print(json.dumps(ours(plan, base, *map(int, load))))
        return 0
    lab = Lab()
    base = f"http://{plan.head.address}:{plan.engine.api_port}"
    with ExitStack() as stack:
        if http_get(f"{base}/health", 5).status != 200:
            launch = plan_launch(plan, f"bench-{secrets.token_hex(3)}")
            nodes = {n.name: n for n in plan.nodes}
            engines = {n: lab.engine(n) for n in nodes}
            deployment = Deployment(launch, nodes, node_io(lab), print, engines=engines)
            stack.enter_context(deployment).perform()
        warm = chat_body(plan.model.served_name, plan.inference.prompt, 8, ignore_eos=True)
        run_load(f"{base}/v1", CHAT_PATH, [warm] * 2, 1, 300)
        print(f"{'level':>5} {'ours tok/s':>11} {'vllm tok/s':>11} {'ratio':>6} {'ours TTFT':>10}"
              f" {'vllm TTFT':>10} {'ratio':>6}  (medians of {args.rounds})")  # fmt: skip
        for level in (int(x) for x in args.levels.split(",")):
            mine: list[dict[str, float]] = []
            theirs: list[dict[str, float]] = []
            load = (level, args.requests, args.max_tokens)
            for r in range(args.rounds):
                for who in ("ours", "vllm") if r % 2 == 0 else ("vllm", "ours"):
                    if who == "ours":
                        mine.append(ours_from(lab, args.ours_from, args.inventory, base, *load)
                                    if args.ours_from else ours(plan, base, *load))  # fmt: skip
                    else:
                        theirs.append(vllm_bench(lab, plan, base, *load))
            a, b = median(mine, "tok_s"), median(theirs, "tok_s")
            c, d = median(mine, "ttft_ms"), median(theirs, "ttft_ms")
            print(f"{level:>5} {a:>11.1f} {b:>11.1f} {a / b:>6.3f} {c:>8.1f}ms {d:>8.1f}ms "
                  f"{c / d:>6.3f}", flush=True)  # fmt: skip
            print(f"      runs: ours {[round(m['tok_s'], 1) for m in mine]} tok/s, "
                  f"vllm {[round(t['tok_s'], 1) for t in theirs]} tok/s; TPOT ours "
                  f"{median(mine, 'tpot_ms'):.1f} ms, vllm {median(theirs, 'tpot_ms'):.1f} ms",
                  flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
