"""py-spy on every lab node, installed as a user would: its wheel from PyPI (`pip download`
once, cached under /var/cache/infergate/wheels), its binary in root's ~/.local/bin on the
node. The engine images stay as they are: the deploy's hang forensics dump from the node,
as root, against the containers' pids (docs/forensics.md).
"""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from infergate_lab.layout import CACHE_DIR, NodeSpec
from infergate_lab.shell import LabError, run

PY_SPY = "py-spy==0.4.3"
WHEELS_DIR = CACHE_DIR / "wheels"
DOWNLOAD_S = 300.0  # a 3 MB wheel


def ensure_py_spy(specs: Iterable[NodeSpec], say: Callable[[str], None]) -> None:
    """py-spy in each node's ~/.local/bin; a lab without it still comes up, saying why."""
    try:
        binary = wheel_binary(cached_wheel())
    except (LabError, OSError, KeyError) as e:
        say(f"py-spy not placed on the nodes (hang forensics will say so): {e}")
        return
    for spec in specs:
        place(spec, binary)


def cached_wheel() -> Path:
    """This machine's py-spy wheel, from the cache or downloaded into it now."""
    name = PY_SPY.replace("-", "_").replace("==", "-")
    if found := sorted(WHEELS_DIR.glob(f"{name}-*.whl")):
        return found[0]
    WHEELS_DIR.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    run([*pip, "-d", str(WHEELS_DIR), PY_SPY], timeout=DOWNLOAD_S)
    if found := sorted(WHEELS_DIR.glob(f"{name}-*.whl")):
        return found[0]
    raise LabError(f"pip download {PY_SPY} left no wheel in {WHEELS_DIR}")


def wheel_binary(wheel: Path) -> bytes:
    """The py-spy executable inside its wheel (under *.data/scripts/)."""
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if n.endswith("/scripts/py-spy"))
        return z.read(member)


def place(spec: NodeSpec, binary: bytes) -> None:
    """BINARY as ~/.local/bin/py-spy of root on the node, unless it is there already."""
    target = spec.home_dir / ".local" / "bin" / "py-spy"
    if target.exists() and target.stat().st_size == len(binary):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    partial.rename(target)
