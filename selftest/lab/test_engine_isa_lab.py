"""The lab's engine on any x86-64 machine of this kind: the kernels are proven the way vLLM
loads them, the ISA it runs on is said, and the AVX2 path serves and passes the smoke suite.

A machine with AVX-512 proves the AVX2 path in the forced-AVX2 test image (engine_isa.py):
vLLM, torch and oneDNN all told the CPU has no AVX-512, and vLLM's AVX-512 kernel builds
unimportable, as they are on such a CPU. A machine without AVX-512 runs the lab's own image
on those kernels: test_inference_lab serves it and runs the whole suite against it there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infergate_lab import Lab
from infergate_lab.engine import LabEngine, serving_alone, smoke_on
from infergate_lab.engine_image import INSTALL_SCRIPT
from infergate_lab.engine_isa import Measured, engine_isa, ensure_avx2_image, load_measured
from selftest.lab.test_inference_lab import short_plan
from selftest.suite import ROOT, run_folder_in, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(2400)]

SERVED = "smollm2-135m"  # inventories/lab.yaml's model.served_name
PORT = 18434


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


# without AVX-512 the lab's own engine runs vllm._C_AVX2: the forced image would repeat it
ON_AVX512_ONLY = pytest.mark.skipif(
    "avx512f" not in cpu_flags(),
    reason="this CPU has no AVX-512: the lab's own engine is the AVX2 path, proven by "
    "test_inference_lab",
)


def recipe_proof_lines() -> list[str]:
    """The recipe's checks after the install: every python3 line from `vllm --version` on."""
    lines = INSTALL_SCRIPT.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if "vllm --version" in ln)
    return [ln for ln in lines[start:] if ln.startswith("/opt/venv/bin/python3")]


@pytest.fixture(scope="module")
def avx2_image(engine: object, lab: Lab) -> str:
    return ensure_avx2_image(lab, "node1")


@pytest.fixture(scope="module")
def measured(engine: LabEngine) -> Measured:
    """`python -m infergate_lab engine --no-models`: the ISA probe in the lab image on the
    first node, as `lab status` then says it (its record, engine_isa.RECORD)."""
    subprocess.run(
        [sys.executable, "-m", "infergate_lab", "engine", "--no-models"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=1200,
    )
    found = load_measured()
    assert found is not None, "`infergate_lab engine` saved no record"
    assert found.image_id == engine.image_id, (found, engine)
    return found


def test_engine_isa_is_the_build_vllm_picks_for_this_cpu(measured):
    flags = cpu_flags()
    expected = (
        "vllm._C"
        if {"avx512f", "avx512_bf16"} <= flags
        else "vllm._C_AVX512"
        if "avx512f" in flags
        else "vllm._C_AVX2"
    )
    found = re.fullmatch(r"(?P<isa>.+) \((?P<kernels>\S+)\)", measured.isa)  # EngineIsa's str
    assert found, measured
    assert found["kernels"] == expected, (measured, sorted(f for f in flags if "avx" in f))
    assert found["isa"].startswith("AVX-512") == ("avx512f" in flags)


def test_forced_avx2_image_runs_the_avx2_kernels(avx2_image, lab):
    found = engine_isa(lab, "node1", avx2_image)
    assert (found.isa, found.kernels, found.amx) == ("AVX2", "vllm._C_AVX2", False)


def test_recipe_proves_the_engine_on_a_cpu_without_avx512(avx2_image, lab):
    """The recipe's own checks pass where vLLM's AVX-512 builds cannot load (importing
    vllm._C by name, as the recipe once did, dies there)."""
    proofs = recipe_proof_lines()
    assert proofs, INSTALL_SCRIPT.read_text()
    mount = f"{INSTALL_SCRIPT.parent}:/mnt/recipe:ro"
    for line in proofs:
        argv = [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            mount,
            avx2_image,
            "sh",
            "-c",
            line,
        ]
        done = lab.node_exec("node1", argv, timeout=300, check=False)
        assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"


@pytest.fixture(scope="module")
def avx2_server(avx2_image: str, lab: Lab) -> Iterator[tuple[str, float]]:
    """SmolLM2 served alone on the AVX2 kernels: its base URL, and its seconds to ready."""
    started = time.monotonic()
    with serving_alone(lab, "node1", SERVED, PORT, "avx2-outside-the-suite", avx2_image) as base:
        yield base, time.monotonic() - started


@ON_AVX512_ONLY
def test_avx2_smoke_says_paris_and_is_measured(avx2_server):
    base, start_s = avx2_server
    done = smoke_on(base, "node1", SERVED, start_s)
    print(f"AVX2 smoke: ready in {done.start_s:.1f} s, {done.tokens_per_s:.1f} tokens/s")
    assert done.start_s > 0
    assert done.tokens_per_s > 0


@ON_AVX512_ONLY
def test_avx2_engine_passes_the_inference_suite(avx2_server, pytester, tmp_path):
    """SmolLM2 on the AVX2 kernels answers the plan's probes and streams, as on AVX-512
    (greedy answers differ between the two kernels: the probes must hold on both); one
    short level: the sweep itself is proven on the lab's own engine."""
    plan = short_plan(tmp_path, [1])
    report = pytester.path / "report"
    base, _ = avx2_server
    run = run_suite(
        pytester,
        "-m",
        "inference",
        "--endpoint",
        f"{base}/v1",
        "--report-dir",
        str(report),
        inventory=plan,
    )
    assert run.red() == set(), run.output
    levels = json.loads((run_folder_in(report) / "results.json").read_text())["levels"]
    rates = {lv["concurrency"]: round(lv["output_throughput"], 1) for lv in levels}
    print(f"AVX2 sweep on this machine, output tokens/s by concurrency: {rates}")


def test_lab_status_says_the_engine_isa(measured):
    done = subprocess.run(
        [sys.executable, "-m", "infergate_lab", "status"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert re.search(r"engine \S+ sha256:\w+: AVX", done.stdout), done.stdout
