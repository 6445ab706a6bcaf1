"""The Scraper against the lab's real vLLM under load: its /metrics read about once a second
says requests ran and the KV cache filled, level by level; report.html plots them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from infergate.inference.client import run_load
from infergate.inference.engine_metrics import Scraper
from infergate.inference.metrics import summarize
from infergate.inference.plan import CHAT_PATH, chat_body
from infergate.reports import files
from infergate.reports import inference as report
from infergate_lab import Lab
from infergate_lab.engine import serving_alone
from selftest.browser import check_page

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

SERVED = "smollm2-135m"
PORT = 18435


@pytest.fixture(scope="module")
def server(engine: object, lab: Lab) -> Iterator[str]:
    with serving_alone(lab, "node1", SERVED, PORT, "infergate-scrape-test") as base:
        yield base


def test_scrapes_follow_the_levels_of_a_real_load(server: str, tmp_path: Path) -> None:
    body = chat_body(SERVED, "Count from one to one hundred.", 64, ignore_eos=True)
    levels = []
    with Scraper(server, interval_s=0.25) as scraper:
        for concurrency in (1, 8):
            scraper.level(f"c={concurrency}")
            run = run_load(f"{server}/v1", CHAT_PATH, [body] * (2 * concurrency), concurrency,
                           120.0)  # fmt: skip
            assert all(r.ok for r in run.records)
            levels.append(summarize(run))
    samples = scraper.samples
    assert scraper.problem == ""
    assert {s.level for s in samples} == {"c=1", "c=8"}
    assert max(s.values["running"] for s in samples if s.level == "c=8") >= 2
    assert max(s.values["kv_cache_usage"] for s in samples) > 0
    assert {"waiting", "preemptions"} <= set(samples[0].values)
    assert [s.t_s for s in samples] == sorted(s.t_s for s in samples)
    meta = report.ReportMeta("lab", f"{server}/v1", SERVED, "now")
    results = report.Results(meta, tuple(levels), engine=samples)
    _, page = files.write_report(tmp_path / "run", results)
    seen = check_page(page, tmp_path / "engine.png")
    assert any(alt.startswith("The engine's /metrics over the load") for alt, _ in seen.images)
    assert seen.broken_images == []
