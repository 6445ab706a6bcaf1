"""Record what each engine's own parser and model registry make of the other engine's flags,
run for real by the in-image probe in the lab's image, as test data.

    python scripts/record_engine_parsers.py      # the lab up with its engine

vLLM 0.32 is the lab image's own. SGLang has no CPU image: its wheel (no dependencies) and
the four modules its import needs beyond what the lab image holds are fetched from PyPI,
unpacked under /var/cache/infergate/sglang-<version>, and put on the probe's PYTHONPATH.
Its parser then runs as it would in a real SGLang image; its model modules do not import
(no torchvision there), a real failure form of an incomplete engine install.

Writes selftest/data/parsers/<engine>-<version>.txt: the probe's sections, one rank alone
(Gloo over lo), every flag of the other engine in the naming table planned, with a value
where it takes one.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import zipfile
from pathlib import Path

from infergate.checks.inimage import probe_command
from infergate.engines.container import ContainerSpec
from infergate.engines.labels import PROBE_LABEL
from infergate.engines.registry import engine_for
from infergate.plan.model import EngineKind
from infergate.remote.docker_api import run_to_exit
from infergate.waiting import Deadline
from infergate_lab import Lab
from infergate_lab.layout import CACHE_DIR

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "selftest" / "data" / "parsers"
IMAGE = "infergate-lab/vllm-cpu:0.32.0"
MODEL = "/srv/models/SmolLM2-135M-Instruct"
SGLANG = "sglang==0.5.23"
SGLANG_NEEDS = ("orjson==3.13.0", "triton==3.9.0", "ipython==9.18.1", "traitlets==5.16.1")
VALUES = {  # a value for each flag of the table that takes one
    "--tensor-parallel-size": "2",
    "--pipeline-parallel-size": "1",
    "--gpu-memory-utilization": "0.8",
    "--max-model-len": "1024",
    "--master-addr": "10.0.0.1",
    "--distributed-executor-backend": "mp",
    "--max-num-seqs": "8",
    "--mem-fraction-static": "0.85",
    "--tp-size": "2",
    "--tp": "2",
    "--dist-init-addr": "10.0.0.1:20000",
    "--model-path": MODEL,
    "--context-length": "1024",
    "--chunked-prefill-size": "512",
    "--nccl-port": "29600",
    "--dist-timeout": "600",
}


def planned(flags: frozenset[str]) -> list[str]:
    return [part for flag in sorted(flags) for part in (flag, *VALUES.get(flag, "").split())]


def sglang_site() -> Path:
    """SGLang's wheel and what its import needs, unpacked once into the cache."""
    site = CACHE_DIR / f"sglang-{SGLANG.split('==')[1]}"
    if (site / "sglang").is_dir():
        return site
    wheels = CACHE_DIR / "wheels"
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    target = ["--python-version", "3.11"]  # the lab image's Debian 12 python
    for glibc in ("2_17", "2_27", "2_28", "2_34"):
        target += ["--platform", f"manylinux_{glibc}_x86_64"]
    subprocess.run([*pip, *target, "-d", str(wheels), SGLANG, *SGLANG_NEEDS], check=True)
    names = {req.split("==")[0].replace("-", "_") for req in (SGLANG, *SGLANG_NEEDS)}
    for wheel in wheels.glob("*.whl"):
        if wheel.name.split("-")[0].lower() in names:
            zipfile.ZipFile(wheel).extractall(site)
    return site


def record(lab: Lab, kind: EngineKind, name: str, env: dict[str, str], mounts: list[str]) -> None:
    engine = engine_for(kind)
    args = [engine.probe.argument(), MODEL, "0", "1", "60", *planned(engine.foreign_flags)]
    env = {**env, "GLOO_SOCKET_IFNAME": "lo"}
    spec = ContainerSpec(IMAGE, False, False, (MODEL, *mounts), tuple(sorted(env.items())), ())
    master = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}
    command = probe_command(args, master, "fresh")
    limit = Deadline(300, "record_engine_parsers")
    with contextlib.closing(lab.engine("node1")) as client:
        done = run_to_exit(
            client, spec, command, limit, f"infergate-record-{name}", {PROBE_LABEL: "record"}
        )
    (OUT / f"{name}.txt").write_text(done.stdout)
    print(f"recorded {name}: exit {done.status}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    lab = Lab(say=print)
    record(lab, "vllm", "vllm-0.32.0", {}, [])
    site = str(sglang_site())
    record(lab, "sglang", "sglang-0.5.23", {"PYTHONPATH": site}, [site])


if __name__ == "__main__":
    main()
