"""The report's pictures from their samples: the binning behind tokens over time, and the
distributions when chunks arrive together (ITL 0)."""

from __future__ import annotations

import dataclasses

from infergate.inference.samples import LevelSamples
from infergate.reports import inference_html, plots
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
