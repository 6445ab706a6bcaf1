"""Full-tier model hashing against a raw sequential read of the same files, on one lab node,
side by side in one run; then the cache-hit re-check of the unchanged model.

    python scripts/bench_model_hash.py [--gib 4] [--files 8] [--node node1]

Makes a model-like directory (GIB of random data in FILES shards plus a config) in the
node's model directory, then, for each of REPEATS rounds: drop the page cache, `cat` every
file to /dev/null (raw sequential read); drop the page cache, hash every file with the
preflight's own script in `full` mode. Both read from disk, cold, in the node over SSH as the
suite runs. Then once with the page cache warm, and the cached re-check. Removes the
directory at the end.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import time

from infergate.checks.model_hash import hash_command, parse_model_hashes
from infergate_lab import Lab

BENCH_DIR = "/srv/models/bench-model"
DROP_CACHES = "sync; echo 3 > /proc/sys/vm/drop_caches"


def on_node(lab: Lab, node: str, command: str, timeout: float = 1800) -> str:
    done = lab.ssh(node, [shlex.join(["sh", "-c", command])], timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{node}: `{command[:80]}` failed: {done.stderr[-500:]}")
    return done.stdout


def timed(lab: Lab, node: str, command: str) -> float:
    start = time.perf_counter()
    on_node(lab, node, command)
    return time.perf_counter() - start


def make_model(lab: Lab, node: str, gib: float, files: int) -> int:
    mib = int(gib * 1024 / files)
    shards = " ".join(
        f"head -c {mib}M /dev/urandom > {BENCH_DIR}/model-{i:05d}-of-{files:05d}.safetensors;"
        for i in range(1, files + 1)
    )
    on_node(lab, node, f"mkdir -p {BENCH_DIR} && echo '{{}}' > {BENCH_DIR}/config.json && {shards}")
    return mib * files * 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--node", default="node1")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lab, node = Lab(), args.node
    size = make_model(lab, node, args.gib, args.files)
    raw_read = f"cat {BENCH_DIR}/* > /dev/null"
    full, cached = hash_command(BENCH_DIR, "full"), hash_command(BENCH_DIR, "cached")
    try:
        raw, hashed = [], []
        for _ in range(args.repeats):
            raw.append(timed(lab, node, f"{DROP_CACHES}; {raw_read}"))
            hashed.append(timed(lab, node, f"{DROP_CACHES}; {full}"))
        warm_raw, warm_hash = timed(lab, node, raw_read), timed(lab, node, full)
        start = time.perf_counter()
        recheck = parse_model_hashes(on_node(lab, node, cached))
        recheck_s = time.perf_counter() - start
    finally:
        on_node(lab, node, f"rm -rf {BENCH_DIR}")
    gb = size / 1e9
    r, h = statistics.median(raw), statistics.median(hashed)
    print(f"\nmodel-like directory: {args.files} files, {size / 2**30:.1f} GiB, on {node}")
    print(f"cold (page cache dropped), median of {args.repeats}:")
    print(f"  raw sequential read (cat)  {r:6.2f} s  {gb / r:5.2f} GB/s")
    print(f"  full-tier SHA-256          {h:6.2f} s  {gb / h:5.2f} GB/s")
    print(f"  hashing / raw read throughput: {r / h:.2f}x  (goal >= 0.9x)")
    print(
        f"warm (in page cache): raw {gb / warm_raw:.2f} GB/s, hashing {gb / warm_hash:.2f} GB/s "
        f"({warm_raw / warm_hash:.2f}x)"
    )
    print(
        f"cache-hit re-check of the unchanged model: {recheck_s * 1000:.0f} ms "
        f"(hashed {recheck.hashed} files)"
    )


if __name__ == "__main__":
    main()
