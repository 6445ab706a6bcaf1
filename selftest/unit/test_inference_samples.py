"""The raw samples behind the report's pictures, from stream records."""

from __future__ import annotations

import pytest

from infergate.inference.samples import level_samples
from selftest.unit.test_inference_lib import TEN_CHUNKS, record


def test_level_samples_spread_usage_over_chunks_and_leave_failures_out() -> None:
    ok = record(TEN_CHUNKS, tokens=20)  # two tokens a chunk
    failed = record([], tokens=None, status=500)
    samples = level_samples("c=2", [ok, failed], began_s=ok.start_s - 1.0)
    assert samples.label == "c=2"
    assert samples.ttft_ms == pytest.approx((100.0,))
    assert len(samples.itl_ms) == 9
    assert [tokens for _, tokens in samples.output_tokens_at] == [2.0] * 10
    assert samples.output_tokens_at[0][0] == pytest.approx(1.1)  # seconds since the level began
