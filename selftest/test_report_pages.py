"""The reports as a person sees them: each page rendered by a real headless Chromium, every
image decoded and every table with rows; the screenshots are kept beside the pages."""

from __future__ import annotations

from pathlib import Path

from infergate.inference import report
from selftest.browser import check_page
from selftest.test_inference_lib import results


def test_inference_report_renders_in_a_browser(tmp_path: Path) -> None:
    _, page = report.write_report(tmp_path / "run", results())
    seen = check_page(page, tmp_path / "report.png")
    assert seen.title == "infergate inference: lab"
    assert len(seen.images) >= 2
    assert seen.broken_images == []
    assert seen.tables
    assert seen.empty_tables == []
    assert seen.screenshot.stat().st_size > 10_000  # a page, not a blank screen


def test_the_browser_check_sees_a_broken_image_and_an_empty_table(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text(
        "<!doctype html><html><head><title>bad</title></head><body>"
        '<img src="data:image/png;base64,AAAA" alt="cut short">'
        "<table><tr><th>only a header</th></tr></table></body></html>"
    )
    seen = check_page(page, tmp_path / "bad.png")
    assert seen.broken_images == ["cut short"]
    assert seen.empty_tables == [0]
