"""Selftest fixtures: the lab on this machine, made once per session and removed after it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from infergate.fixtures.progress import print_now
from infergate_lab import Lab
from infergate_lab.engine import LabEngine, ensure_engine
from selftest.lab_guard import LOCK, lab_guard
from selftest.suite import SuiteRun, run_suite


@pytest.fixture(scope="session")
def lab(pytestconfig: pytest.Config) -> Iterator[Lab]:
    """A 2-node lab (made if missing, kept if there); removed, and proven gone, at the end
    (INFERGATE_KEEP_LAB=1 keeps it, for the next run of a developer's edit-test loop).
    One run at a time has it: a second waits for the first's end (selftest.lab_guard)."""
    if os.geteuid() != 0:
        pytest.skip("the lab makes namespaces, cgroups and mounts: it needs root")
    with lab_guard(LOCK, lambda line: print_now(pytestconfig, line)):
        handle = Lab()
        handle.up(2)
        yield handle
        if os.environ.get("INFERGATE_KEEP_LAB") == "1":
            return
        handle.down()
        assert handle.leftovers() == [], "`down` left lab things on the machine"
        assert handle.status() == [], "`down` left lab nodes in the lab's record"


@pytest.fixture
def clean_lab(lab: Lab) -> Iterator[Lab]:
    """The lab, with every fault the test injected cleared after it."""
    yield lab
    lab.clear_faults()


@pytest.fixture(scope="module")
def engine(lab: Lab) -> LabEngine:
    """The lab's engine image and models on every node: built once per machine (~6 min
    cold, cached under /var/cache/infergate), then checked per module (a few seconds) since
    a test module may have remade the lab."""
    return ensure_engine(lab, say=print)


@pytest.fixture
def engine_lab(engine: LabEngine, lab: Lab) -> Iterator[Lab]:
    """The lab with its engine, every fault the test injected cleared after it."""
    yield lab
    lab.clear_faults()


@pytest.fixture(scope="session")
def session_runs() -> dict[str, SuiteRun]:
    """Suite runs made once a session, by the first test that asks for each, kept by name."""
    return {}


@pytest.fixture
def healthy_preflight(
    engine_lab: Lab, pytester: pytest.Pytester, session_runs: dict[str, SuiteRun]
) -> SuiteRun:
    """`-m preflight` on the healthy lab with its engine, run once a session (in the folder of
    the first test that asks) for every test that reads the whole green preflight."""
    if "healthy preflight" not in session_runs:
        session_runs["healthy preflight"] = run_suite(pytester, "-m", "preflight")
    return session_runs["healthy preflight"]


@pytest.fixture
def no_key_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's subprocess inherits this environment: only the test says where a key is."""
    for name in ("INFERGATE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
