"""The suite's phases, the packages that hold their tests, and whether a pytest run is one
of the suite's: the plugin keeps to itself in any other project's run."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

PHASES = ("preflight", "deploy", "inference")
PACKAGES = tuple(f"infergate.tests_{p}" for p in PHASES)


def phase_of(module: object) -> str | None:
    """preflight for infergate.tests_preflight.test_host (or tests_preflight.test_host)."""
    package = getattr(module, "__name__", "").rpartition(".")[0].rpartition(".")[2]
    phase = package.removeprefix("tests_")
    return phase if package.startswith("tests_") and phase in PHASES else None


def suite_folders() -> list[Path]:
    """Where the phases' tests are: the installed packages, or a clone's folders (editable)."""
    found = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        found += [Path(p).resolve() for p in (spec and spec.submodule_search_locations) or ()]
    return found


def names_the_suite(args: Iterable[str], base: Path, pyargs: bool) -> bool:
    """Whether test ARGS (relative to BASE) reach a phase's tests: a package of the suite
    under --pyargs, or a path at, inside or above one of its folders."""
    folders = suite_folders()
    for arg in args:
        target = arg.split("::", 1)[0]
        if pyargs and (target == "infergate" or target.startswith(PACKAGES)):
            return True
        path = (base / target).resolve()
        if any(path.is_relative_to(f) or below(f, path) for f in folders):
            return True
    return False


def below(folder: Path, path: Path) -> bool:
    """FOLDER is inside PATH, and pytest would collect it from there: not in an installed
    environment's packages (pytest passes over virtualenvs)."""
    installed = {"site-packages", "dist-packages"} & set(folder.parts)
    return folder.is_relative_to(path) and not installed
