"""The extras: `plots` (matplotlib) and `openai`, neither needed by a preflight. Without
matplotlib report.html keeps its tables and verdict and says how to get the plots; without
openai the official client's test is skipped saying how to get it. "Not installed" is made
for real in a child process: None in its sys.modules, which Python's import refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infergate.reports import inference_html
from selftest.local_http import serving
from selftest.suite import closed_plan, run_suite
from selftest.unit.test_endpoint_gate import scripted, url_of
from selftest.unit.test_inference_lib import results

ROOT = Path(__file__).resolve().parents[2]
NO_PLOTS = (
    "<p>No plots: matplotlib is not installed; for them: "
    "<code>pip install &#x27;pytest-infergate[plots]&#x27;</code>"
)
WRITE_WITHOUT_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None
from pathlib import Path
from infergate.reports.files import write_report
from selftest.unit.test_inference_lib import results
write_report(Path(sys.argv[1]), results())
"""
CLIENT_TEST = "test_conformance.py::test_openai_client_works_end_to_end"


def test_without_matplotlib_the_report_has_its_tables_and_says_how_to_get_plots(
    tmp_path: Path,
) -> None:
    argv = [sys.executable, "-c", WRITE_WITHOUT_MATPLOTLIB, str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "report.html").read_text()
    assert NO_PLOTS in page
    assert "data:image/png" not in page
    assert "<p class='fail'>" in page  # the verdict: one check failed
    assert "<h2>Tokens/s and latency per level</h2>" in page
    assert "<h2>Checks</h2>" in page
    assert (tmp_path / "results.json").exists()


def test_with_matplotlib_the_report_has_its_plots_and_no_such_line() -> None:
    page = inference_html.render_html(results())
    assert page.count('<img src="data:image/png;base64,') == 3  # the per-level ones
    assert "No plots: matplotlib" not in page


@pytest.mark.parametrize(("strict", "status"), [((), "skipped"), (("--strict",), "failed")])
def test_without_openai_the_client_test_is_skipped_saying_how_to_get_it(
    pytester: pytest.Pytester, strict: tuple[str, ...], status: str
) -> None:
    """Skipped; failed under --strict, a gate that must not pass on what it did not run."""
    pytester.makepyfile(no_openai="import sys\nsys.modules['openai'] = None\n")
    report = str(pytester.path / "report")
    with serving(scripted()) as httpd:
        run = run_suite(
            pytester,
            *("-p", "no_openai", "-m", "inference", "--endpoint", url_of(httpd), *strict),
            *("--endpoint-wait", "1", "--report-dir", report, "-k", "openai_client"),
            inventory=closed_plan(pytester.path),
        )
    assert run.outcomes[CLIENT_TEST].status == status, run.output
    said = "the openai package is not installed: pip install 'pytest-infergate[openai]'"
    assert said in run.message(CLIENT_TEST)
