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
suite runs; each drop is a call of its own, not timed. Then once with the page cache warm,
and the cached re-check. Removes the directory at the end.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import time
from dataclasses import dataclass

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


def cold(lab: Lab, node: str, command: str) -> float:
    """Seconds of COMMAND on NODE, the page cache dropped just before: the drop, and the
    write-back of what was dirty (the model just made, in the first round), are not timed."""
    on_node(lab, node, DROP_CACHES)
    return timed(lab, node, command)


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


@dataclass(frozen=True)
class Hashing:
    """What one run measured on the node (seconds, bytes, bytes/s)."""

    node: str
    sizes: list[int]
    cores: int
    one_core: float  # one core's SHA-256 rate
    raw: list[float]  # cold `cat` of every file, each round
    hashed: list[float]  # cold full-tier hash, each round
    warm_raw: float
    warm_hash: float
    recheck_s: float  # the cache-hit re-check of the unchanged model
    recheck_hashed: int  # files it hashed again (none, when the cache holds)

    @property
    def size(self) -> int:
        return sum(self.sizes)

    @property
    def cold_read(self) -> float:
        return self.size / statistics.median(self.raw)

    @property
    def cold_hash(self) -> float:
        return self.size / statistics.median(self.hashed)

    @property
    def cold_limit(self) -> float:
        return limit(self.sizes, self.cold_read, self.cores, self.one_core)

    @property
    def cores_limit(self) -> float:
        return limit(self.sizes, float("inf"), self.cores, self.one_core)

    @property
    def warm_limit(self) -> float:
        return limit(self.sizes, self.size / self.warm_raw, self.cores, self.one_core)


def measure(node: str, gib: float, files: int, repeats: int) -> Hashing:
    """REPEATS cold rounds of `cat` and the full hash, then one warm of each and the re-check,
    on a model-like directory of GIB in FILES made on NODE and removed after."""
    lab = Lab()
    cores, one_core = node_cpu(lab, node)
    sizes = make_model(lab, node, gib, files)
    raw_read = f"cat {BENCH_DIR}/* > /dev/null"
    full, cached = hash_command(BENCH_DIR, "full"), hash_command(BENCH_DIR, "cached")
    try:
        raw, hashed = [], []
        for _ in range(repeats):
            raw.append(cold(lab, node, raw_read))
            hashed.append(cold(lab, node, full))
        warm_raw, warm_hash = timed(lab, node, raw_read), timed(lab, node, full)
        start = time.perf_counter()
        recheck = parse_model_hashes(on_node(lab, node, cached))
        recheck_s = time.perf_counter() - start
    finally:
        on_node(lab, node, f"rm -rf {BENCH_DIR}")
    return Hashing(
        node, sizes, cores, one_core, raw, hashed, warm_raw, warm_hash, recheck_s, recheck.hashed
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--node", default="node1")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    m = measure(args.node, args.gib, args.files, args.repeats)
    size, r, h = m.size, statistics.median(m.raw), statistics.median(m.hashed)
    cold, warm = m.cold_limit, m.warm_limit
    print(f"\nmodel-like directory: {args.files} files, {size / 2**30:.1f} GiB, on {m.node}")
    print(
        f"{m.node}: {m.cores} usable cores, one core's SHA-256 {m.one_core / GB:.2f} GB/s "
        "(512 MiB in memory, best of 3)"
    )
    print(f"cold (page cache dropped), median of {args.repeats}:")
    print(f"  raw sequential read (cat)  {r:6.2f} s  {size / r / GB:5.2f} GB/s")
    print(
        f"  limit: min(disk, cores)             {cold / GB:5.2f} GB/s  "
        f"(cores alone: {m.cores_limit / GB:.2f} GB/s)"
    )
    print(f"  full-tier SHA-256          {h:6.2f} s  {size / h / GB:5.2f} GB/s")
    print(f"  SHA-256 / limit: {size / h / cold:.2f}x  (goal >= 0.9x); / raw read: {r / h:.2f}x")
    print(
        f"warm (in page cache): raw {size / m.warm_raw / GB:.2f} GB/s, limit {warm / GB:.2f} "
        f"GB/s, hashing {size / m.warm_hash / GB:.2f} GB/s ({size / m.warm_hash / warm:.2f}x "
        "the limit)"
    )
    print(
        f"cache-hit re-check of the unchanged model: {m.recheck_s * 1000:.0f} ms "
        f"(hashed {m.recheck_hashed} files)"
    )


if __name__ == "__main__":
    main()
