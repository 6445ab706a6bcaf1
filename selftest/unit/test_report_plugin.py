"""The inference report is a plugin while the inference tests run: a test directory with
its own conftest.py must not stop pytest (pluggy keeps plugins in sets: an unhashable
dataclass there was an INTERNALERROR)."""

from __future__ import annotations

import pytest

from infergate.fixtures.endpoint import InferenceReport

CONFTEST = """
import pytest

from infergate.fixtures.endpoint import InferenceReport
from infergate.fixtures.endpoint import InferenceReport

@pytest.fixture(scope="session")
def report(pytestconfig):
    collected = InferenceReport()
    pytestconfig.pluginmanager.register(collected, "infergate-inference-report")
    yield collected
    pytestconfig.pluginmanager.unregister(collected)
"""


def test_a_sub_directory_conftest_runs_beside_the_report(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_first="def test_first(report): pass")
    sub = pytester.mkpydir("sub")
    (sub / "conftest.py").write_text("")
    (sub / "test_second.py").write_text("def test_second(report): pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:infergate")
    assert "INTERNALERROR" not in result.stdout.str(), result.stdout.str()
    result.assert_outcomes(passed=2)


SUITE = """
def test_answers(): pass
def test_refuses(): assert False
"""


@pytest.mark.parametrize(
    ("rootdir", "node_id"),
    [
        (".", "tests_inference/test_x.py::test_answers"),
        ("tests_inference", "test_x.py::test_answers"),
    ],
    ids=["clone", "installed"],
)
def test_every_inference_test_is_kept_whatever_its_node_id(
    pytester: pytest.Pytester, rootdir: str, node_id: str
) -> None:
    """A clone's node ids name the suite's folder; an installed suite's start inside it (the
    rootdir a user's repo, the package elsewhere): the report keeps the tests of both."""
    (pytester.mkpydir("tests_inference") / "test_x.py").write_text(SUITE)
    pytester.makepyfile(test_other="def test_elsewhere(): pass")
    collected = InferenceReport()
    args = ["-p", "no:cacheprovider", "-p", "no:infergate", f"--rootdir={rootdir}"]
    run = pytester.inline_run(*args, "tests_inference", "test_other.py", plugins=[collected])
    assert node_id in [r.nodeid for r in run.getreports("pytest_runtest_logreport")]
    kept = [(o.name, o.status) for o in collected.outcomes]
    assert kept == [("test_answers", "passed"), ("test_refuses", "failed")]
