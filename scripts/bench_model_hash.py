"""Full-tier model hashing against the machine's limit for it, on one lab node, side by side
in one run; then the cache-hit re-check of the unchanged model.

    python scripts/bench_model_hash.py [--gib 4] [--files 8] [--node node1]

The limit: the disk's read rate, or the cores' SHA-256 rate if that is lower. SHA-256 is one
sequential chain per file, so the cores bound it as a schedule does: the whole over every
usable core, and never under the largest file alone on one core. Measured on the node: its
usable cores (sched_getaffinity), one core's SHA-256 of an in-memory buffer (best of 3), and
the disk's rate as `cat` reads.

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

from infergate.checks.model_hash import GB, hash_command, parse_model_hashes
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


def make_model(lab: Lab, node: str, gib: float, files: int) -> list[int]:
    """The sizes of the files made: FILES shards and a 3-byte config."""
    mib = int(gib * 1024 / files)
    shards = " ".join(
        f"head -c {mib}M /dev/urandom > {BENCH_DIR}/model-{i:05d}-of-{files:05d}.safetensors;"
        for i in range(1, files + 1)
    )
    on_node(lab, node, f"mkdir -p {BENCH_DIR} && echo '{{}}' > {BENCH_DIR}/config.json && {shards}")
    return [mib * 2**20] * files + [3]


def node_cpu(lab: Lab, node: str) -> tuple[int, float]:
    """The node's usable cores and one core's SHA-256 rate (bytes/s): its own python3 hashes
    512 MiB in memory, best of 3."""
    script = (
        "import hashlib, os, time; b = bytes(512 << 20); s = []\n"
        "for _ in range(3):\n"
        "    t = time.perf_counter(); hashlib.sha256(b); s.append(time.perf_counter() - t)\n"
        "print(len(os.sched_getaffinity(0)), len(b) / min(s))"
    )
    cores, rate = on_node(lab, node, f"python3 -c {shlex.quote(script)}").split()
    return int(cores), float(rate)


def limit(sizes: list[int], disk: float, cores: int, one_core: float) -> float:
    """The fastest a full hash can go (bytes/s): DISK's rate, or the cores' if lower, where
    no file is split across cores (one SHA-256 chain each)."""
    total = sum(sizes)
    hashing_s = max(total / cores, max(sizes)) / one_core
    return min(disk, total / hashing_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--node", default="node1")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lab, node = Lab(), args.node
    cores, one_core = node_cpu(lab, node)
    sizes = make_model(lab, node, args.gib, args.files)
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
    size = sum(sizes)
    r, h = statistics.median(raw), statistics.median(hashed)
    cold, warm = (
        limit(sizes, size / r, cores, one_core),
        limit(sizes, size / warm_raw, cores, one_core),
    )
    print(f"\nmodel-like directory: {args.files} files, {size / 2**30:.1f} GiB, on {node}")
    print(
        f"{node}: {cores} usable cores, one core's SHA-256 {one_core / GB:.2f} GB/s "
        "(512 MiB in memory, best of 3)"
    )
    print(f"cold (page cache dropped), median of {args.repeats}:")
    print(f"  raw sequential read (cat)  {r:6.2f} s  {size / r / GB:5.2f} GB/s")
    print(
        f"  limit: min(disk, cores)             {cold / GB:5.2f} GB/s  "
        f"(cores alone: {limit(sizes, float('inf'), cores, one_core) / GB:.2f} GB/s)"
    )
    print(f"  full-tier SHA-256          {h:6.2f} s  {size / h / GB:5.2f} GB/s")
    print(f"  SHA-256 / limit: {size / h / cold:.2f}x  (goal >= 0.9x); / raw read: {r / h:.2f}x")
    print(
        f"warm (in page cache): raw {size / warm_raw / GB:.2f} GB/s, limit {warm / GB:.2f} GB/s, "
        f"hashing {size / warm_hash / GB:.2f} GB/s ({size / warm_hash / warm:.2f}x the limit)"
    )
    print(
        f"cache-hit re-check of the unchanged model: {recheck_s * 1000:.0f} ms "
        f"(hashed {recheck.hashed} files)"
    )


if __name__ == "__main__":
    main()
