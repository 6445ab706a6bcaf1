"""The served greedy answers match a reference recorded on a trusted topology (inference.parity,
docs/parity.md); with --record-reference PATH, they are recorded into PATH instead."""

from __future__ import annotations

import pytest

from infergate.fixtures.endpoint import ServedBy
from infergate.fixtures.parity import ParityRun, served_by_fail

pytestmark = [pytest.mark.xdist_group("deployment"), pytest.mark.usefixtures("inference_report")]


def test_answer_matches_the_reference(
    parity_run: ParityRun, served_by: ServedBy, parity_index: int
) -> None:
    """Each planned prompt's greedy answer matches the reference's for at least
    min_matching_tokens, its chosen tokens' logprobs within max_logprob_drift."""
    served = served_by_fail(served_by, parity_run.ask(parity_run.parity.prompts[parity_index]))
    served_by.fail(parity_run.judge(served))
