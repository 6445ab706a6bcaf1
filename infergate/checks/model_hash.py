"""SHA-256 of every model file, computed on the node itself, all nodes at once.

The script runs with the node's own python3 (standard library only). Results are cached on
the node in ~/.cache/infergate/sha256/<sha1 of the model path>.json, keyed by (path, size,
mtime, ctime, inode): an unchanged model re-checks in about no time and writes nothing, and
a byte rewritten in place is still caught, because restoring the mtime (`touch -d`) moves
the ctime. `full` ignores the cache. Prune: `rm -rf ~/.cache/infergate/sha256`.

Files hash in parallel, one per usable core, largest first, each read by a thread of its own
a few buffers ahead of its hash. SHA-256 is one sequential chain per file, so one file hashes
at one core's rate at most: a model of one huge file is bounded by it, whatever the cores.

While it hashes, the script says how far it is on stderr, one JSON line every few seconds
(a reader thread's counter, so hashing itself waits for nothing): a 127 GB model is minutes.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

_HASH = r"""
import hashlib, json, os, queue, stat, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
root, mode, every_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
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
CHUNK, AHEAD = READ_BYTES, 2  # the reader stays up to 2 buffers ahead of the hash
def digest(rel):
    fd = os.open(os.path.join(root, rel), os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise") and stat.S_ISREG(os.fstat(fd).st_mode):  # a pipe: ESPIPE
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # a larger kernel readahead
        return hashed(fd)
    finally:
        os.close(fd)
def hashed(fd):
    # SHA-256 is one sequential chain per file: a file hashes at one core's rate at most,
    # whatever the pool. Within it, a reader thread fills the next buffers while this one
    # hashes (os.readv and hashlib's update of a large buffer both let go of the GIL). The
    # reader touches fd no more once it has put its last item: EOF (0) or its error.
    free, full = queue.Queue(), queue.Queue()
    for _ in range(AHEAD + 1):
        free.put(bytearray(CHUNK))
    threading.Thread(target=read_ahead, args=(fd, free, full), daemon=True).start()
    h = hashlib.sha256()
    while True:
        buf, n = full.get()
        if isinstance(n, Exception):
            raise n  # the error the read itself raised, as when this thread read
        if not n:
            return h.hexdigest()
        with memoryview(buf) as view:
            h.update(view[:n])
        free.put(buf)
        with counted:
            done[0] += n
def read_ahead(fd, free, full):
    try:
        while True:
            buf = free.get()
            n = os.readv(fd, [buf])
            full.put((buf, n))
            if not n:
                return
    except Exception as e:  # any: else the hashing thread would wait for ever
        full.put((None, e))
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
# one file per usable core (the node's affinity, as taskset or a cpuset leaves it), largest
# first, so the last to finish is a small one; at most 16 (AHEAD + 1 buffers each)
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
order = sorted(todo, key=lambda r: -keys[r][0])
with ThreadPoolExecutor(max(1, min(16, cores or 1, len(order)))) as pool:
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
READ_BYTES = 8 << 20  # one read: large enough that the syscalls and the GIL cost nothing
_HASH = _HASH.replace("READ_BYTES", str(READ_BYTES))
PROGRESS_EVERY_S = 10.0  # a line per node: sixteen nodes say less than two lines a second
GB, MB = 1e9, 1e6


def hash_command(model_path: str, mode: str, every_s: float = PROGRESS_EVERY_S) -> str:
    """`mode` is `cached` (reuse what is unchanged) or `full` (hash every byte again);
    progress on stderr every EVERY_S seconds."""
    return f"python3 -c {shlex.quote(_HASH)} {shlex.quote(model_path)} {mode} {every_s:g}"


@dataclass(frozen=True)
class ModelHashes:
    sha256: dict[str, str]
    hashed: int  # files hashed this time (the rest came from the cache)
    hashed_bytes: int
    seconds: float

    @property
    def cache_hits(self) -> int:
        """Files whose digest came from the node's cache, unchanged since it was taken."""
        return len(self.sha256) - self.hashed

    def __str__(self) -> str:
        rate = f", {self.hashed_bytes / MB / self.seconds:.0f} MB/s" if self.seconds else ""
        return (f"hashed {self.hashed} file(s), {self.hashed_bytes / GB:.2f} GB, in "
                f"{self.seconds:.1f} s{rate}; {self.cache_hits} from the cache")  # fmt: skip


def parse_model_hashes(text: str) -> ModelHashes:
    """Parse the hashing script's one JSON line: ``{"sha256": {...}, "hashed": 3, ...}``."""
    doc = json.loads(text.strip().splitlines()[-1])
    return ModelHashes(doc["sha256"], doc["hashed"], doc["hashed_bytes"], doc["seconds"])


@dataclass(frozen=True)
class HashProgress:
    done: int  # bytes hashed so far
    total: int  # bytes to hash (what the cache does not cover)
    seconds: float

    def __str__(self) -> str:
        share = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
        rate = f", {self.done / MB / self.seconds:.0f} MB/s" if self.seconds else ""
        return f"{self.done / GB:.2f} of {self.total / GB:.2f} GB{share}{rate}"


def parse_hash_progress(line: str) -> HashProgress | None:
    """One progress line of the hashing script's stderr, ``{"done": 4194304, "total":
    8388608, "seconds": 10.0}``; None for any other line (python3's own warnings)."""
    try:
        doc = json.loads(line)
        return HashProgress(int(doc["done"]), int(doc["total"]), float(doc["seconds"]))
    except (ValueError, KeyError, TypeError):
        return None
