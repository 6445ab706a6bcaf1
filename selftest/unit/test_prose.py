"""The prose budget of CONTRIBUTING.md, kept: a module docstring of at most 10 lines, a
docstring of at most 3 lines before its sample, and `ruff format` over `# fmt: skip`, in
the library, the fixtures and the suites."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("infergate", "fixtures", "tests_preflight", "tests_deploy", "tests_inference")
MODULE_LINES = 10
DOC_LINES = 3
# where a docstring's sample begins: a parser's quoted output, a doctest, vLLM's "Check that"
SAMPLE = re.compile(r"\s*(Samples?\b|Examples?\b|>>>|``|Check that:|Args:)")


def modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def ids(path: Path) -> str:
    return str(path.relative_to(ROOT))


def before_sample(doc: str) -> int:
    """The lines of DOC before its sample (all of them where it has none)."""
    lines = doc.strip().splitlines()
    return next((i for i, line in enumerate(lines) if SAMPLE.match(line)), len(lines))


def long_docstrings(tree: ast.Module) -> list[str]:
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [
        f"{n.name} (line {n.lineno}): {before_sample(doc)} lines"
        for n in ast.walk(tree)
        if isinstance(n, kinds) and (doc := ast.get_docstring(n))
        if before_sample(doc) > DOC_LINES
    ]


@pytest.mark.parametrize("path", modules(), ids=ids)
def test_module_docstring_fits_the_budget(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert len(doc.splitlines()) <= MODULE_LINES


@pytest.mark.parametrize("path", modules(), ids=ids)
def test_docstrings_fit_the_budget_before_their_sample(path: Path) -> None:
    assert long_docstrings(ast.parse(path.read_text())) == []


@pytest.mark.parametrize("path", modules(), ids=ids)
def test_ruff_format_wins_over_fmt_skip(path: Path) -> None:
    assert "# fmt: skip" not in path.read_text()


def test_the_budget_fails_a_long_docstring() -> None:
    long = ast.parse('def f():\n    """One.\n    Two.\n    Three.\n    Four."""\n')
    sampled = ast.parse('def f():\n    """One.\n\n    Sample: ``a b``\n    ``c d``\n    """\n')
    assert long_docstrings(long) == ["f (line 1): 4 lines"]
    assert long_docstrings(sampled) == []
