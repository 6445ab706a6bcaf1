"""Three layers, one direction: the library never imports the test framework or does I/O
through it; the root conftest only names plugins."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"pytest", "testinfra", "_pytest", "fixtures", "requests", "docker", "paramiko"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "path", sorted((ROOT / "infergate").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_library_module_imports_no_test_framework(path):
    assert imported_roots(path) & FORBIDDEN == set()


def test_root_conftest_only_names_plugins():
    tree = ast.parse((ROOT / "conftest.py").read_text())
    (statement,) = tree.body
    assert isinstance(statement, ast.Assign)
    assert [t.id for t in statement.targets if isinstance(t, ast.Name)] == ["pytest_plugins"]
