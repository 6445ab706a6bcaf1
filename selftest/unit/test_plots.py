"""The report's pictures from their samples: the binning behind tokens over time, the
distributions when chunks arrive together (ITL 0), and the plan's gates drawn on them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from infergate.inference.samples import LevelSamples
from infergate.reports import inference_html, plots
from infergate.reports.files import write_report
from infergate.reports.inference import Gates
from infergate.reports.inference_json import read_results
from selftest.unit.test_inference_lib import results


def test_output_tokens_are_binned_per_whole_second() -> None:
    level = LevelSamples("c=1", (), (), ((0.2, 1.0), (0.9, 2.0), (2.5, 3.0), (2.99, 0.5)))
    assert plots.tokens_per_second(level) == [3.0, 0.0, 3.5]
    assert plots.tokens_per_second(LevelSamples("c=1", (), (), ())) == []


def test_gaps_of_zero_count_in_the_distribution() -> None:
    level = LevelSamples("c=4", (50.0, 70.0), (0.0, 0.0, 0.0, 10.0), ())
    picture = plots.plot_cdf([level], "itl_ms", "ITL")
    assert picture.alt == "Cumulative distribution of ITL per level: c=4 median 0.0 ms, p99 9.7 ms"


def test_a_level_whose_gaps_are_all_zero_has_no_itl_picture() -> None:
    level = LevelSamples("c=4", (50.0, 70.0), (0.0, 0.0), ())
    page = inference_html.render_html(dataclasses.replace(results(), samples=(level,)))
    assert "Cumulative distribution of TTFT" in page
    assert "Cumulative distribution of ITL" not in page


def test_the_plans_gates_are_drawn_and_said_and_kept(tmp_path: Path) -> None:
    """Each gate the plan sets is a line on its picture, said in the alt text, and kept in
    results.json; one it does not set is neither."""
    gates = Gates(min_output_tok_s=50.0, max_ttft_ms=800.0, slo_ttft_ms=1500.0, slo_tpot_ms=None)
    gated = dataclasses.replace(results(), gates=gates)
    page = inference_html.render_html(gated)
    assert "the plan&#x27;s floor, at the highest level: 50 tok/s" in page
    assert "the plan&#x27;s limit of the median at c=1: 800 ms" in page
    assert "the plan&#x27;s SLO per request: 1500 ms" in page
    assert "TPOT SLO" not in page
    assert "the plan&#x27;s" not in inference_html.render_html(results())
    json_path, _ = write_report(tmp_path / "run", gated)
    assert read_results(json_path).gates == gates
