"""SHA-256 of every model file, computed on the node itself by its own python3, all nodes at
once. Each node caches its digests by (path, size, mtime, ctime, inode), which `full` ignores;
while it hashes, the script prints its progress on stderr (docs/checks.md#model-hash).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

_HASH = r"""
import hashlib, json, os, stat, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
root, mode, every_s, read_bytes = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
cache_dir = os.path.expanduser("~/.cache/infergate/sha256")
name = hashlib.sha1(os.path.realpath(root).encode()).hexdigest()
cache_file = os.path.join(cache_dir, name + ".json")
try:
    with open(cache_file) as f:
        cache = json.load(f)
except (OSError, ValueError):
    cache = {}
before = dict(cache)
files = sorted(os.path.relpath(os.path.join(d, n), root)
               for d, _, names in os.walk(root) for n in names)
def key(rel):
    s = os.stat(os.path.join(root, rel))
    return [s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino]
mine = threading.local()  # a worker's read buffer, for every file it hashes
def digest(rel):
    # SHA-256 is one sequential chain per file: one file hashes at one core's rate at most,
    # whatever the pool. While this thread hashes a read, the kernel reads on ahead
    # (POSIX_FADV_SEQUENTIAL doubles its readahead window): a reader thread per file of our
    # own measured no faster, at more CPU (scripts/bench_model_hash.py).
    if not hasattr(mine, "buf"):
        mine.buf = bytearray(read_bytes)
    h, buf = hashlib.sha256(), mine.buf
    view, fd = memoryview(buf), os.open(os.path.join(root, rel), os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise") and stat.S_ISREG(os.fstat(fd).st_mode):  # a pipe: ESPIPE
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while True:
            n = os.readv(fd, [buf])  # lets go of the GIL, as update() of a large buffer does
            if not n:
                return h.hexdigest()
            h.update(view[:n])
            with counted:
                done[0] += n
    finally:
        os.close(fd)
def say_progress():
    while not finished.wait(every_s):
        seconds = round(time.monotonic() - start, 1)
        sys.stderr.write(json.dumps({"done": done[0], "total": total, "seconds": seconds}) + "\n")
        sys.stderr.flush()
start, keys = time.monotonic(), {rel: key(rel) for rel in files}
todo = [r for r in files if mode == "full" or cache.get(r, [None])[:-1] != keys[r]]
done, total = [0], sum(keys[r][0] for r in todo)
counted, finished = threading.Lock(), threading.Event()
threading.Thread(target=say_progress, daemon=True).start()
# two files per usable core (the node's affinity, as taskset or a cpuset leaves it): while
# one thread waits for the disk, the other hashes; largest first, so the last to finish is a
# small one
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
order = sorted(todo, key=lambda r: -keys[r][0])
with ThreadPoolExecutor(max(1, min(16, 2 * (cores or 1), len(order)))) as pool:
    for rel, sha in zip(order, pool.map(digest, order)):
        cache[rel] = keys[rel] + [sha]
finished.set()
out = {rel: cache[rel][-1] for rel in files}
kept = {r: cache[r] for r in files}
if kept != before:  # an unchanged model writes nothing on the node
    os.makedirs(cache_dir, exist_ok=True)
    tmp = "%s.%d.tmp" % (cache_file, os.getpid())
    try:
        with open(tmp, "w") as f:
            json.dump(kept, f)
        os.replace(tmp, cache_file)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
print(json.dumps({"sha256": out, "hashed": len(todo), "hashed_bytes": total,
                  "seconds": round(time.monotonic() - start, 3)}))
"""
# one read: large enough that the syscalls and the GIL cost nothing
READ_BYTES = 4 << 20
# a line per node: sixteen nodes say less than two lines a second
PROGRESS_EVERY_S = 10.0
GB, MB = 1e9, 1e6


def _rate(nbytes: int, seconds: float) -> str:
    """`, 812 MB/s`, or nothing before any time has passed."""
    return f", {nbytes / MB / seconds:.0f} MB/s" if seconds else ""


def hash_command(model_path: str, mode: str, every_s: float = PROGRESS_EVERY_S) -> str:
    """`mode` is `cached` (reuse what is unchanged) or `full` (hash every byte again);
    progress on stderr every EVERY_S seconds."""
    quoted = shlex.quote(model_path)
    return f"python3 -c {shlex.quote(_HASH)} {quoted} {mode} {every_s:g} {READ_BYTES}"


@dataclass(frozen=True)
class ModelHashes:
    """Each file's digest, and the files `hashed` this time (the rest came from the cache),
    their bytes and seconds."""

    sha256: dict[str, str]
    hashed: int
    hashed_bytes: int
    seconds: float

    @property
    def cache_hits(self) -> int:
        """Files whose digest came from the node's cache, unchanged since it was taken."""
        return len(self.sha256) - self.hashed

    def __str__(self) -> str:
        return (
            f"hashed {self.hashed} file(s), {self.hashed_bytes / GB:.2f} GB, in "
            f"{self.seconds:.1f} s{_rate(self.hashed_bytes, self.seconds)}; "
            f"{self.cache_hits} from the cache"
        )


def parse_model_hashes(text: str) -> ModelHashes:
    """Parse the hashing script's one JSON line: ``{"sha256": {...}, "hashed": 3, ...}``."""
    doc = json.loads(text.strip().splitlines()[-1])
    return ModelHashes(doc["sha256"], doc["hashed"], doc["hashed_bytes"], doc["seconds"])


def hash_failed(where: str, model_path: str, status: int, stderr: str) -> str:
    """What a node's failed hash says: the script stops at the first file it cannot read and
    raises that file's own error (`PermissionError: ... '/models/x/model-00002.safetensors'`),
    its last line of stderr."""
    lines = stderr.strip().splitlines()
    error = lines[-1] if lines else f"no message (exit status {status})"
    return (
        f"{where}: hashing every file of {model_path} failed: {error}\n"
        f"    found: a file that could not be read; planned: every file of the model readable\n"
        "    fix: the file the error names: `ls -l` it (a socket or a device left in the model "
        "directory cannot be hashed; an I/O error is the disk's: `dmesg | grep -i 'i/o error'`), "
        "then copy the model to this node again"
    )


@dataclass(frozen=True)
class HashProgress:
    """The bytes hashed so far, of the `total` to hash (what the cache does not cover)."""

    done: int
    total: int
    seconds: float

    def __str__(self) -> str:
        share = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
        rate = _rate(self.done, self.seconds)
        return f"{self.done / GB:.2f} of {self.total / GB:.2f} GB{share}{rate}"


def parse_hash_progress(line: str) -> HashProgress | None:
    """One progress line of the hashing script's stderr, ``{"done": 4194304, "total":
    8388608, "seconds": 10.0}``; None for any other line (python3's own warnings)."""
    try:
        doc = json.loads(line)
        return HashProgress(int(doc["done"]), int(doc["total"]), float(doc["seconds"]))
    except (ValueError, KeyError, TypeError):
        return None
