"""The inference report is a plugin while the inference tests run: a test directory with
its own conftest.py must not stop pytest (pluggy keeps plugins in sets: an unhashable
dataclass there was an INTERNALERROR)."""

from __future__ import annotations

import pytest

CONFTEST = """
import pytest
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
