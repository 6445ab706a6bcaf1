"""Ours is `pytest-infergate` on PyPI: `infergate` there is another project (a semantic
router), so a template or doc that installs the bare name installs theirs. Every such file in
the clone is read for an install of it through pip, pipx or uv, or a requirement on it."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".md", ".yml", ".yaml", ".toml", ".sh", ".cfg")
NAMES = ("Makefile", "Dockerfile")
BARE = "infergate"
# the command, then what it installs: pip (python -m pip, a venv's "…/bin/pip"), pipx, uv, uvx
INSTALL = re.compile(
    r"\b(?:pip3?[\"']?\s+install|pipx\s+(?:install|run)|uv\s+(?:pip\s+install|add|tool\s+"
    r"(?:install|run))|uvx)\s(?P<args>.*)"
)
# a requirement on it anywhere: infergate[all], infergate==0.1.0, infergate>=0.1
SPECIFIED = re.compile(r"(?<![\w./-])infergate\s*(?:\[[\w,\s-]*\]|[=<>~!]=|[<>]\s*\d)")
REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(.*)")
SHELL_DEFAULT = re.compile(r"\$\{\w+:?-([^}]*)\}")  # ${INFERGATE:-infergate}
VARIABLE = re.compile(r"^\$\{?(\w+)\}?$")  # "$INFERGATE", set elsewhere in the file


def names_bare(requirement: str) -> bool:
    """Whether a requirement (or a word pip takes for one) is PyPI's `infergate`."""
    found = REQUIREMENT.fullmatch(requirement.rstrip(".,;:)"))
    if found is None:
        return False
    name, rest = found.groups()
    normal = re.sub(r"[-_.]+", "-", name).lower()
    return normal == BARE and (rest == "" or rest[0] in "[=<>~!;@ ")


def assigned(text: str, variable: str) -> str:
    """VARIABLE's value where TEXT sets it (`NAME: value` in YAML, `NAME=value` in shell)."""
    found = re.search(rf"^\s*{variable}\s*[:=]\s*[\"']?([^\"'\s#]+)", text, re.MULTILINE)
    return found.group(1) if found else ""


def installed_words(text: str, args: str) -> Iterator[str]:
    """The words an install command's ARGS give pip, quotes dropped and variables read (a
    shell comment after them is not given)."""
    for word in re.split(r"[\s`'\"]+", re.sub(r"\s#.*", "", args)):
        word = SHELL_DEFAULT.sub(r"\1", word)
        variable = VARIABLE.match(word)
        yield assigned(text, variable.group(1)) if variable else word


def toml_requirements(text: str) -> list[str]:
    """A pyproject's dependencies, extras and build requirements."""
    data = tomllib.loads(text)
    project = data.get("project", {})
    extras = project.get("optional-dependencies", {}).values()
    build = data.get("build-system", {}).get("requires", [])
    return [*project.get("dependencies", []), *(r for e in extras for r in e), *build]


def bare_installs(text: str, toml: bool = False) -> list[str]:
    """What in TEXT installs the bare name: its lines, and a TOML file's requirements."""
    found = [r for r in toml_requirements(text) if names_bare(r)] if toml else []
    for line in text.splitlines():
        command = INSTALL.search(line)
        words = installed_words(text, command.group("args")) if command else ()
        if SPECIFIED.search(line) or any(names_bare(w) for w in words):
            found.append(line.strip())
    return found


def scanned_files() -> Iterator[Path]:
    """The clone's docs, templates and build files, outside .git and any virtualenv."""
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [
            s for s in subfolders if s != ".git" and not (Path(folder, s, "pyvenv.cfg")).exists()
        ]
        for name in files:
            if name.endswith(SUFFIXES) or name.startswith(NAMES):
                yield Path(folder, name)


@pytest.mark.parametrize(
    "line",
    [
        "pip install infergate",
        "pip3 install -U --quiet infergate",
        "python -m pip install 'infergate[all]'",
        'pip install "infergate==0.1.0"',
        "Install it with `pip install infergate`.",
        '"$RUNNER_TEMP/venv/bin/pip" install --quiet "${INFERGATE:-infergate}"',
        "pipx install infergate",
        "uv pip install infergate",
        "uv tool install infergate",
        "uvx infergate preflight",
        "uv add 'infergate>=0.1'",
        "infergate==0.1.0",
        "  - infergate[plots]",
    ],
)
def test_an_install_of_the_bare_name_is_found(line: str) -> None:
    assert bare_installs(line) == [line.strip()]


@pytest.mark.parametrize(
    "line",
    [
        "pip install pytest-infergate",
        "pip install 'pytest-infergate[all]'",
        'pip install "${INFERGATE:-pytest-infergate[all]}"',
        "pip install path/to/pytest_infergate-0.1.0-py3-none-any.whl[plots]",
        "pip install -e '.[dev]' -e ./lab",
        "infergate preflight --inventory=plan.yaml",
        "pip install infergate-lab",
        "pip install pytest-infergate   # from PyPI; `infergate` there is another project",
        "import infergate.fixtures.plugin",
    ],
)
def test_our_own_name_and_the_command_pass(line: str) -> None:
    assert bare_installs(line) == []


def test_a_variable_that_names_it_is_found() -> None:
    job = 'variables:\n  INFERGATE: infergate\nscript:\n  - pip install --quiet "$INFERGATE"\n'
    assert bare_installs(job) == ['- pip install --quiet "$INFERGATE"']
    assert bare_installs(job.replace(": infergate", ": pytest-infergate[all]")) == []


def test_a_pyproject_dependency_on_it_is_found() -> None:
    lab = '[project]\nname = "infergate-lab"\ndependencies = ["infergate"]\n'
    assert bare_installs(lab, toml=True) == ["infergate"]
    assert bare_installs(lab.replace('"infergate"]', '"pytest-infergate"]'), toml=True) == []


def test_no_doc_or_template_installs_the_bare_name() -> None:
    files = list(scanned_files())
    names = {str(p.relative_to(ROOT)) for p in files}
    assert {"README.md", "Makefile", "docs/ci/gitlab-ci.yml", "lab/pyproject.toml"} <= names
    found = [
        f"{path.relative_to(ROOT)}: {said}"
        for path in files
        for said in bare_installs(path.read_text(errors="replace"), path.suffix == ".toml")
    ]
    assert found == [], "install pytest-infergate (PyPI's infergate is another project)"
