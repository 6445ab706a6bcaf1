"""The lab's engine on any x86-64 machine of this kind: the kernels are proven the way vLLM
loads them, the ISA it runs on is said, and the AVX2 path serves and passes the smoke suite.

A machine with AVX-512 proves the AVX2 path in the forced-AVX2 test image (engine_isa.py):
vLLM, torch and oneDNN all told the CPU has no AVX-512, and vLLM's AVX-512 kernel builds
unimportable, as they are on such a CPU."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infergate_lab import Lab
from infergate_lab.engine import serving_alone, smoke_serve
from infergate_lab.engine_image import IMAGE, INSTALL_SCRIPT
from infergate_lab.engine_isa import engine_isa, ensure_avx2_image
from selftest.suite import ROOT, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(2400)]

SERVED = "smollm2-135m"  # inventories/lab.yaml's model.served_name
PORT = 18434


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def recipe_proof_lines() -> list[str]:
    """The recipe's checks after the install: every python3 line from `vllm --version` on."""
    lines = INSTALL_SCRIPT.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if "vllm --version" in ln)
    return [ln for ln in lines[start:] if ln.startswith("/opt/venv/bin/python3")]


@pytest.fixture(scope="module")
def avx2_image(engine: object, lab: Lab) -> str:
    return ensure_avx2_image(lab, "node1")


def test_engine_isa_is_the_build_vllm_picks_for_this_cpu(engine, lab):
    flags = cpu_flags()
    expected = (
        "vllm._C" if {"avx512f", "avx512_bf16"} <= flags
        else "vllm._C_AVX512" if "avx512f" in flags
        else "vllm._C_AVX2"
    )  # fmt: skip
    found = engine_isa(lab, "node1", IMAGE)
    assert found.kernels == expected, (found, sorted(f for f in flags if "avx" in f))
    assert found.isa.startswith("AVX-512") == ("avx512f" in flags)


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
        argv = ["docker", "run", "--rm", "--network", "none", "-v", mount, avx2_image,
                "sh", "-c", line]  # fmt: skip
        done = lab.node_exec("node1", argv, timeout=300, check=False)
        assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"


def test_avx2_smoke_says_paris_and_is_measured(avx2_image, lab):
    done = smoke_serve(lab, "node1", avx2_image)
    print(f"AVX2 smoke: ready in {done.start_s:.1f} s, {done.tokens_per_s:.1f} tokens/s")
    assert done.start_s > 0
    assert done.tokens_per_s > 0


@pytest.fixture(scope="module")
def avx2_server(avx2_image: str, lab: Lab) -> Iterator[str]:
    with serving_alone(lab, "node1", SERVED, PORT, "avx2-outside-the-suite", avx2_image) as base:
        yield base


def test_avx2_engine_passes_the_inference_suite(avx2_server, pytester):
    """SmolLM2 on the AVX2 kernels answers the plan's probes and streams, as on AVX-512
    (greedy answers differ between the two kernels: the probes must hold on both)."""
    report = pytester.path / "report"
    run = run_suite(pytester, "-m", "inference", "--endpoint", f"{avx2_server}/v1",
                    "--report-dir", str(report))  # fmt: skip
    assert run.red() == set(), run.output
    levels = json.loads((report / "results.json").read_text())["levels"]
    rates = {lv["concurrency"]: round(lv["output_throughput"], 1) for lv in levels}
    print(f"AVX2 sweep on this machine, output tokens/s by concurrency: {rates}")


def test_lab_status_says_the_engine_isa(engine):
    subprocess.run([sys.executable, "-m", "infergate_lab", "engine", "--no-models"],
                   cwd=ROOT, check=True, capture_output=True, timeout=1200)  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "infergate_lab", "status"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert re.search(r"engine \S+ sha256:\w+: AVX", done.stdout), done.stdout
