"""SHA-256 of every model file, computed on the node itself, all nodes at once.

The script runs with the node's own python3 (standard library only). Results are cached on
the node in ~/.cache/infergate/sha256/<sha1 of the model path>.json, keyed by (path, size,
mtime, ctime, inode): an unchanged model re-checks in about no time and writes nothing, and
a byte rewritten in place is still caught, because restoring the mtime (`touch -d`) moves
the ctime. `full` ignores the cache. Prune: `rm -rf ~/.cache/infergate/sha256`.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

_HASH = r"""
import hashlib, json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
root, mode = sys.argv[1], sys.argv[2]
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
def digest(rel):
    # 4 MiB reads into one buffer; update() lets go of the GIL, so files hash in parallel
    h, buf = hashlib.sha256(), bytearray(4 << 20)
    view, fd = memoryview(buf), os.open(os.path.join(root, rel), os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while True:
            n = os.readv(fd, [buf])
            if not n:
                return h.hexdigest()
            h.update(view[:n])
    finally:
        os.close(fd)
start, keys = time.monotonic(), {rel: key(rel) for rel in files}
todo = [r for r in files if mode == "full" or cache.get(r, [None])[:-1] != keys[r]]
# more readers than cores: the disk serves parallel streams faster than one (measured: 4
# threads on 2 cores hash at about the speed `cat` reads; scripts/bench_model_hash.py)
with ThreadPoolExecutor(max(4, min(16, 2 * (os.cpu_count() or 2)))) as pool:
    for rel, sha in zip(todo, pool.map(digest, todo)):
        cache[rel] = keys[rel] + [sha]
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
print(json.dumps({"sha256": out, "hashed": len(todo), "hashed_bytes": sum(keys[r][0] for r in todo),
                  "seconds": round(time.monotonic() - start, 3)}))
"""


def hash_command(model_path: str, mode: str) -> str:
    """`mode` is `cached` (reuse what is unchanged) or `full` (hash every byte again)."""
    return f"python3 -c {shlex.quote(_HASH)} {shlex.quote(model_path)} {mode}"


@dataclass(frozen=True)
class ModelHashes:
    sha256: dict[str, str]
    hashed: int  # files hashed this time (the rest came from the cache)
    hashed_bytes: int
    seconds: float


def parse_model_hashes(text: str) -> ModelHashes:
    """Parse the hashing script's one JSON line: ``{"sha256": {...}, "hashed": 3, ...}``."""
    doc = json.loads(text.strip().splitlines()[-1])
    return ModelHashes(doc["sha256"], doc["hashed"], doc["hashed_bytes"], doc["seconds"])
