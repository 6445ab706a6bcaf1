"""The reports as a person sees them: each page rendered by a real headless Chromium, every
image decoded and every table with rows; the screenshots are kept beside the pages."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from infergate.inference.samples import EngineSample, LevelSamples
from infergate.reports import files
from infergate.reports import inference as report
from selftest.browser import check_page
from selftest.unit.test_inference_lib import results


def test_inference_report_renders_in_a_browser(tmp_path: Path) -> None:
    _, page = files.write_report(tmp_path / "run", results())
    seen = check_page(page, tmp_path / "report.png")
    assert seen.title == "infergate inference: lab"
    assert len(seen.images) >= 2
    assert seen.broken_images == []
    assert seen.tables
    assert seen.empty_tables == []
    assert seen.screenshot.stat().st_size > 10_000  # a page, not a blank screen


def level_samples(label: str, requests: int, rng: random.Random) -> LevelSamples:
    """A level's samples as a load of REQUESTS 20-chunk answers would leave them."""
    ttft = [rng.uniform(30, 300) for _ in range(requests)]
    itl = [rng.uniform(8, 40) for _ in range(requests * 19)]
    starts = [rng.uniform(0, 6) for _ in range(requests)]
    chunks = sorted((start + k * 0.03, 1.0) for start in starts for k in range(20))
    return LevelSamples(label, tuple(ttft), tuple(itl), tuple(chunks))


def engine_samples(labels: list[str]) -> tuple[EngineSample, ...]:
    """One scrape a second, 7 s a level, the queue and the cache growing with the level."""
    scrapes = []
    for i, label in enumerate(labels):
        for t in range(7):
            figures = {
                "kv_cache_usage": 0.1 * (i + 1),
                "running": 4.0 * i + 1,
                "waiting": float(i * t),
                "preemptions": float(3 * i),
            }
            scrapes.append(EngineSample(7.0 * i + t, label, figures))
    return tuple(scrapes)


def pictured() -> report.Results:
    labels = ["c=1", "c=4", "c=16"]
    rng = random.Random(14)
    samples = tuple(level_samples(label, 16, rng) for label in labels)
    return dataclasses.replace(results(), samples=samples, engine=engine_samples(labels))


def test_every_picture_renders_in_a_browser(tmp_path: Path) -> None:
    _, page = files.write_report(tmp_path / "run", pictured())
    text = page.read_text()
    seen = check_page(page, tmp_path / "pictures.png")
    alts = [alt for alt, _ in seen.images]
    for shown in (
        "Median TPOT against output tokens/s, one point per level: c=1",
        "Cumulative distribution of TTFT per level: c=1 median",
        "Cumulative distribution of ITL per level: c=1 median",
        "Output tokens/s per second, the levels one after another: c=1",
        "The engine's /metrics over the load, 21 scrapes: KV cache used up to 30%, "
        "up to 9 running and 12 waiting requests, 6 preemptions",
    ):
        assert any(alt.startswith(shown) for alt in alts), (shown, alts)
    assert len(seen.images) == 7
    assert seen.broken_images == []
    assert seen.tables
    assert seen.empty_tables == []
    assert "No plot" not in text
    assert "No distributions" not in text
    assert "<script" not in text
    assert "http" not in text.replace(results().meta.endpoint, "")


def test_a_picture_without_data_is_a_sentence(tmp_path: Path) -> None:
    _, page = files.write_report(tmp_path / "run", results())  # no samples, no scrapes
    text = page.read_text()
    assert text.count("<img ") == 3  # the per-level plots alone
    assert "No distributions: the run kept no TTFT or ITL samples." in text
    assert "No plot: the run kept no output tokens over time." in text
    assert "No plot: the engine served no /metrics" in text


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
