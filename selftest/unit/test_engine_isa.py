"""The engine's ISA line and the measured record, on the probe's real outputs (selftest/data/lab:
the lab image on an AVX-512 machine, and its forced-AVX2 test image)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infergate_lab.engine_isa import Measured, measured_line, parse_engine_isa, save_measured
from infergate_lab.shell import LabError

DATA = Path(__file__).parents[1] / "data" / "lab"


def test_avx512_machine_runs_the_avx512_bf16_build():
    found = parse_engine_isa((DATA / "engine-isa-avx512.txt").read_text())
    assert str(found) == "AVX-512 (vllm._C)"
    assert found.amx is False


def test_forced_avx2_image_runs_the_avx2_build():
    found = parse_engine_isa((DATA / "engine-isa-forced-avx2.txt").read_text())
    assert str(found) == "AVX2 (vllm._C_AVX2)"


def test_kernels_that_did_not_load_are_an_error_naming_the_build():
    text = (
        (DATA / "engine-isa-forced-avx2.txt")
        .read_text()
        .replace('"loaded": true', '"loaded": false')
    )
    with pytest.raises(LabError, match=r"did not load \(vllm\._C_AVX2\)"):
        parse_engine_isa(text)


def test_a_probe_that_printed_no_json_shows_its_output():
    with pytest.raises(LabError, match="Illegal instruction"):
        parse_engine_isa("Illegal instruction (core dumped)\n")


def test_status_line_says_the_isa_and_the_smoke(tmp_path):
    record = tmp_path / "engine-measured.json"
    assert "not measured on this machine yet" in measured_line(record)
    save_measured(Measured("img", "sha256:" + "a" * 64, "AVX2 (vllm._C_AVX2)", 251.6, 9.04), record)
    line = measured_line(record)
    assert "AVX2 (vllm._C_AVX2)" in line
    assert "ready in 252 s, 9.0 tokens/s" in line
