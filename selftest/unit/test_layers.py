"""Three layers, one direction: the library never imports the test framework, the fixtures
or the tests, nor the lab; the fixtures never import the lab; the root conftest names no
infergate plugin (the entry point loads it).

Inside the library, imports run down LAYERS, one home per concept: the words a failure is
made of, the catalogue of checks, the clock and held signals, the suite's phases; the plan;
what differs by engine; reaching nodes and judging what they say; the phases (preflight,
deploy, inference) and their reports; the catalogue's documents; the command. No cycle runs
between the packages. A module placed in no layer fails, so each new one is placed on
purpose."""

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"pytest", "testinfra", "_pytest", "fixtures", "paramiko"}
ABOVE_THE_LIBRARY = ("infergate.fixtures", "infergate.tests_", "infergate_lab", "tests_")


LAYERS = (
    (
        *("infergate.problems", "infergate.catalogue", "infergate.waiting"),
        *("infergate.interrupts", "infergate.suites"),
    ),
    ("infergate.plan",),
    ("infergate.engines",),
    ("infergate.remote", "infergate.checks"),
    ("infergate.preflight", "infergate.deploy", "infergate.inference", "infergate.reports"),
    ("infergate.catalogue_doc",),
    ("infergate.cli", "infergate.options", "infergate"),
)
PACKAGES = tuple(name for names in LAYERS[1:-1] for name in names)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


LIBRARY = {module_name(p): p for p in sorted((ROOT / "infergate").rglob("*.py"))}


def layer(module: str) -> int:
    """The layer of MODULE: its own entry, else its nearest package's (never the root's: its
    entry is the root's __init__ alone)."""
    parts = module.split(".")
    for below in [module] + [".".join(parts[:n]) for n in range(len(parts) - 1, 1, -1)]:
        for number, names in enumerate(LAYERS):
            if below in names:
                return number
    raise LookupError(f"{module} is in no layer: place it in LAYERS")


def library_imports(path: Path, typing: bool = True) -> set[str]:
    """The library modules PATH imports, at the top or inside a function (a name imported
    from a package, `from infergate import http_session`, is that module)."""
    found = set()
    for name in imported_names(path, names=True, typing=typing):
        module = name if name in LIBRARY else name.rpartition(".")[0]
        if module in LIBRARY and module != "infergate":
            found.add(module)
    return found


def imported_names(path: Path, names: bool = False, typing: bool = True) -> set[str]:
    """The modules PATH imports; with NAMES, also each name imported from one, as a dotted
    path (a name may be a module: `from infergate import http_session`); without TYPING,
    leaving out what it imports for type checking only."""
    tree = ast.parse(path.read_text())
    if not typing:
        checking = [n for n in ast.walk(tree) if isinstance(n, ast.If) and _type_checking(n)]
        for block in checking:
            block.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names} if names else set()
    return found


def _type_checking(block: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(block.test)


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


def upward_imports() -> set[tuple[str, str]]:
    return {
        (module, imported)
        for module, path in LIBRARY.items()
        for imported in library_imports(path)
        if layer(imported) > layer(module)
    }


def test_library_imports_run_down_the_layers():
    assert upward_imports() == set()


@pytest.mark.parametrize("module", sorted(LIBRARY))
def test_library_module_has_a_layer(module):
    layer(module)


def test_library_packages_import_one_another_without_a_cycle():
    """checks, deploy and inference: a cycle between them would make one layer of the two."""
    graph: dict[str, set[str]] = {package: set() for package in PACKAGES}
    for module, path in LIBRARY.items():
        home = next((p for p in PACKAGES if module.startswith(f"{p}.")), None)
        for imported in library_imports(path):
            there = next((p for p in PACKAGES if imported.startswith(f"{p}.")), None)
            if home and there and there != home:
                graph[home].add(there)
    assert graph["infergate.deploy"]  # the walk sees imports between packages at all
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError, naming the cycle


def test_root_conftest_only_names_pytester():
    """The plugin comes through its entry point: naming it here as well registers it twice."""
    tree = ast.parse((ROOT / "conftest.py").read_text())
    (statement,) = tree.body
    assert isinstance(statement, ast.Assign)
    assert [t.id for t in statement.targets if isinstance(t, ast.Name)] == ["pytest_plugins"]
    assert ast.literal_eval(statement.value) == ["pytester"]


def test_library_modules_import_one_another_without_a_cycle_at_run_time():
    """A cycle is allowed only through imports made for type checking."""
    graph = {
        module: library_imports(path, typing=False) - {module} for module, path in LIBRARY.items()
    }
    assert graph["infergate.plan.model"]  # the walk sees imports between modules at all
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError, naming the cycle
