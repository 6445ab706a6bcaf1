"""DCGM's diagnostic (`dcgmi diag -r LEVEL -j`) read and judged on forms **composed** from
NVIDIA's documented JSON (NVIDIA/DCGM testing/python3/dcgm_diag_schema.json): the lent H200
hosts have no DCGM (selftest/data/README.md)."""

import subprocess
from pathlib import Path

import pytest

from infergate.checks.dcgm import (
    ABSENT,
    check_dcgm_diag,
    dcgm_command,
    judge_dcgm,
    parse_dcgmi_diag_json,
)
from infergate.checks.probe import parse_sections

DCGM = Path(__file__).parents[1] / "data" / "dcgm"


def _text(name):
    return (DCGM / name).read_text()


def test_passing_diag_has_a_result_per_test_and_gpu_and_no_problem():
    diag = parse_dcgmi_diag_json(_text("diag-r2-pass.json"))
    seen = {(r.category, r.test, r.entity, r.status) for r in diag.results}
    assert ("Hardware", "memory", "GPU 1", "Pass") in seen
    assert len(diag.results) == 4
    assert diag.version == "4.2.3"
    assert check_dcgm_diag(diag, 2) == []


def test_failed_test_is_named_with_its_gpu_and_message():
    problems = judge_dcgm(_text("diag-r2-fail.json"), 226, 2)
    assert len(problems) == 1
    found = problems[0].found
    assert "Hardware test memory failed on GPU 1" in found
    assert "thermal violation in GPU 1" in found
    assert "error_id 10" in found
    assert "dcgmi diag -r 2" in problems[0].planned
    assert "dcgmi diag -r 2 -v" in problems[0].remedy


def test_runtime_error_is_the_one_problem():
    problems = judge_dcgm(_text("diag-runtime-error.json"), 1, 1)
    assert len(problems) == 1
    assert "did not run: Couldn't find the GPUs" in problems[0].found


def test_no_host_engine_names_its_start():
    problems = judge_dcgm(_text("diag-no-hostengine.txt"), 1, 1)
    assert len(problems) == 1
    assert "printed no result (exit 1)" in problems[0].found
    assert "systemctl start nvidia-dcgm" in problems[0].remedy


def test_older_form_with_text_warnings_and_info_is_read():
    old = (
        '{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": '
        '[{"name": "Diagnostic", "results": [{"gpu_ids": "0", "status": "Fail", '
        '"warnings": "Stormlight usage exceeded.", "info": "10 broams / s"}]}]}]}}'
    )
    problems = check_dcgm_diag(parse_dcgmi_diag_json(old), 3)
    assert "Diagnostic failed on GPU 0: Stormlight usage exceeded.; info: 10 broams / s" in (
        problems[0].found
    )


def _run(command, path):
    done = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, env={"PATH": path}, check=False
    )
    return parse_sections(done.stdout)["dcgmi"]


def test_command_says_absent_without_dcgmi(tmp_path):
    section = _run(dcgm_command(1), f"{tmp_path}:/usr/bin:/bin")
    assert (section.rc, section.text) == (0, ABSENT)


@pytest.mark.parametrize("rc", [0, 226])
def test_command_carries_dcgmi_output_and_exit_status(tmp_path, rc):
    """A `dcgmi` on PATH that prints the composed failing form and exits RC."""
    fake = tmp_path / "dcgmi"
    fake.write_text(f'#!/bin/sh\necho "$@" >&2\ncat {DCGM / "diag-r2-fail.json"}\nexit {rc}\n')
    fake.chmod(0o755)
    section = _run(dcgm_command(2), f"{tmp_path}:/usr/bin:/bin")
    assert section.rc == rc
    assert section.text.startswith("diag -r 2 -j")  # its stderr is kept: a refusal's words
    assert len(judge_dcgm(section.text, section.rc, 2)) == 1
