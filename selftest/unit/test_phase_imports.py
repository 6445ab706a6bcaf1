"""One phase never fails because another phase's imports are missing: `pytest -m gpu` on a
GPU host without the inference client (the lent 2xH200 host has no `openai`) must collect.
The phases' test modules import only the standard library, pytest and the project at module
level; a phase's own dependency is imported inside the test that needs it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PHASE_MODULES = sorted(ROOT.glob("tests_*/test_*.py"))
OURS = {"__future__", "pytest", "fixtures", "infergate"}


def module_level_imports(path: Path) -> set[str]:
    """Top-level package names a module imports when it is loaded (not under TYPE_CHECKING)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", PHASE_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_phase_module_imports_nothing_of_another_phase(path: Path) -> None:
    third_party = module_level_imports(path) - OURS - set(sys.stdlib_module_names)
    assert third_party == set(), f"import these inside the tests that need them: {third_party}"


def test_gpu_phase_collects_without_the_extras() -> None:
    # `openai` and `matplotlib` made unimportable, as where the extras were never installed;
    # collecting imports every phase's modules and the plugin, then -m deselects
    run = (
        "import sys; sys.modules['openai'] = sys.modules['matplotlib'] = None; import pytest; "
        "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', "
        "'-m', 'gpu', '--inventory=inventories/h200-device.yaml']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", run], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "test_gpu.py::test_gpus_present_as_planned[h200]" in done.stdout
