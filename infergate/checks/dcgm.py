"""NVIDIA DCGM's own diagnostic where a node has it: `dcgmi diag -r LEVEL -j`, its JSON read
here and each failed test named with what DCGM said. The form is DCGM 4's, as its schema in
NVIDIA/DCGM testing/python3/dcgm_diag_schema.json gives it; the older one (`warnings` a text,
`gpu_ids`) is read too (docs/checks.md#dcgm-diag).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infergate.problems import Problem

# each level's deadline: NVIDIA gives 1 as seconds, 2 as ~2 min, 3 as ~15 min
# (https://docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgmi/dcgmi-diag.html)
DIAG_TIMEOUT_S = {1: 120, 2: 600, 3: 1800, 4: 7200}
ABSENT = "absent"  # the section's text where the node has no dcgmi


def dcgm_command(level: int) -> str:
    """The node's shell command: `dcgmi diag` under its level's deadline in a `dcgmi` section
    (rc its exit status), or the section's text `absent` where there is no dcgmi."""
    timeout = DIAG_TIMEOUT_S[level]
    return (
        "if command -v dcgmi >/dev/null 2>&1; then "
        f"out=$(timeout -k 5 {timeout} dcgmi diag -r {level} -j 2>&1); rc=$?; "
        'printf "@@@ dcgmi %s\\n%s\\n" "$rc" "$out"; '
        f'else printf "@@@ dcgmi 0\\n{ABSENT}\\n"; fi'
    )


@dataclass(frozen=True)
class DiagResult:
    """One test's result on one entity (`GPU 0`), with what DCGM said about it."""

    category: str
    test: str
    entity: str
    status: str
    said: tuple[str, ...]


@dataclass(frozen=True)
class DcgmDiag:
    results: tuple[DiagResult, ...]
    runtime_error: str = ""
    version: str = ""


def parse_dcgmi_diag_json(text: str) -> DcgmDiag:
    """Parse `dcgmi diag -r LEVEL -j`: the tests of each category with each entity's result.

    Sample (DCGM 4's form, composed from its schema): ``{"DCGM Diagnostic": {"test_categories":
    [{"category": "Deployment", "tests": [{"name": "software", "results": [{"entity_group":
    "GPU", "entity_id": 0, "status": "Pass"}], "test_summary": {"status": "Pass"}}]}]}}``
    """
    body = json.loads(text[text.find("{") : text.rfind("}") + 1])
    diag = body.get("DCGM Diagnostic") or body.get("DCGM GPU Diagnostic") or {}
    results = [
        result
        for category in diag.get("test_categories", ())
        for test in category.get("tests", ())
        for result in _results(str(category.get("category", "?")), test)
    ]
    version = str(body.get("metadata", {}).get("version", ""))
    return DcgmDiag(tuple(results), str(diag.get("runtime_error", "")), version)


def _results(category: str, test: Mapping[str, Any]) -> list[DiagResult]:
    name = str(test.get("name", "?"))
    found = [
        DiagResult(category, name, _entity(r), str(r.get("status", "?")), _said(r))
        for r in test.get("results", ())
    ]
    summary = str(test.get("test_summary", {}).get("status", ""))
    if not found and summary:
        found = [DiagResult(category, name, "all", summary, ())]
    return found


def _entity(result: Mapping[str, Any]) -> str:
    if "entity_id" in result:
        return f"{result.get('entity_group', 'GPU')} {result['entity_id']}"
    return f"GPU {result.get('gpu_ids', '?')}"


def _said(result: Mapping[str, Any]) -> tuple[str, ...]:
    """The warnings (DCGM 4: objects with `warning` and `error_id`; before: a text) and info."""
    said = []
    warnings = result.get("warnings", ())
    for w in [warnings] if isinstance(warnings, str) else warnings:
        if isinstance(w, Mapping):
            said.append(f"{w.get('warning', '').strip()} (error_id {w.get('error_id', '?')})")
        elif str(w).strip():
            said.append(str(w).strip())
    info = result.get("info", ())
    said += [f"info: {i}" for i in ([info] if isinstance(info, str) else info) if str(i).strip()]
    return tuple(said)


def check_dcgm_diag(diag: DcgmDiag, level: int) -> list[Problem]:
    """DCGM's diagnostic at LEVEL ran and no test failed on any entity; a warning is DCGM's
    own pass (dcgmi exits 0 on it) and is left to its text."""
    if diag.runtime_error:
        return [_problem(f"dcgmi diag -r {level} did not run: {diag.runtime_error[:300]}", level)]
    failed = [r for r in diag.results if r.status.lower() == "fail"]
    return [_failed(r, level) for r in failed]


def _failed(result: DiagResult, level: int) -> Problem:
    said = "; ".join(result.said)[:400] or "no message"
    return _problem(
        f"DCGM {result.category} test {result.test} failed on {result.entity}: {said}", level
    )


def _problem(found: str, level: int) -> Problem:
    return Problem(
        found=found,
        planned=f"every test of `dcgmi diag -r {level}` passing",
        remedy="what DCGM's message names (each DCGM_FR_* code's action: "
        "https://docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/); run it again "
        f"alone on the node: `dcgmi diag -r {level} -v`",
    )


def check_dcgm_ran(text: str, rc: int, level: int) -> list[Problem]:
    """dcgmi printed its JSON: else what it said (no host engine answering, most often)."""
    if "{" in text:
        return []
    said = " ".join(text.split())[:300] or f"nothing (exit {rc})"
    engine = "host engine" in said.lower() or "connection" in said.lower()
    remedy = (
        "start DCGM's host engine: `sudo systemctl start nvidia-dcgm` (or `nv-hostengine`)"
        if engine
        else f"run `dcgmi diag -r {level} -j` on the node and read what it says"
    )
    return [
        Problem(
            found=f"dcgmi diag -r {level} printed no result (exit {rc}): {said}",
            planned=f"`dcgmi diag -r {level} -j`'s JSON",
            remedy=remedy,
        )
    ]


def judge_dcgm(text: str, rc: int, level: int) -> list[Problem]:
    """The `dcgmi` section: that dcgmi ran, then its result."""
    return check_dcgm_ran(text, rc, level) or check_dcgm_diag(parse_dcgmi_diag_json(text), level)
