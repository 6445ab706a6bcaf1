"""Three layers, one direction: the library never imports the test framework, the fixtures
or the tests, nor the lab; the fixtures never import the lab; the root conftest names no
infergate plugin (the entry point loads it).

`requests` is the library's HTTP client (infergate.http_session makes its sessions): doing
HTTP is no test framework's business, and one client for the gate, the conformance calls and
the load keeps the key, TLS, proxy and timeout policy in one place. `docker` (docker-py) is
the library's client of each node's Docker Engine API (infergate.docker_api)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"pytest", "testinfra", "_pytest", "fixtures", "paramiko"}
ABOVE_THE_LIBRARY = ("infergate.fixtures", "infergate.tests_", "infergate_lab", "tests_")


def imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def imported_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imported_names(path)}


def modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def ids(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", modules("infergate"), ids=ids)
def test_library_module_imports_no_test_framework(path):
    assert imported_roots(path) & FORBIDDEN == set()


@pytest.mark.parametrize("path", modules("infergate"), ids=ids)
def test_library_module_imports_no_fixtures_tests_or_lab(path):
    assert {n for n in imported_names(path) if n.startswith(ABOVE_THE_LIBRARY)} == set()


@pytest.mark.parametrize("path", modules("fixtures"), ids=ids)
def test_fixture_module_imports_no_lab(path):
    assert "infergate_lab" not in imported_roots(path)


def test_root_conftest_only_names_pytester():
    """The plugin comes through its entry point: naming it here as well registers it twice."""
    tree = ast.parse((ROOT / "conftest.py").read_text())
    (statement,) = tree.body
    assert isinstance(statement, ast.Assign)
    assert [t.id for t in statement.targets if isinstance(t, ast.Name)] == ["pytest_plugins"]
    assert ast.literal_eval(statement.value) == ["pytester"]
