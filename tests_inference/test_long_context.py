"""The planned context really fits: a request at each rung of the context length (25 % to
95 % by default, inference.ladder), then several at once at the top, each completes with the
planned token counts (docs/context-ladder.md)."""

from __future__ import annotations

import pytest

from infergate.fixtures.endpoint import ServedBy
from infergate.fixtures.ladder import Climb
from infergate.fixtures.plugin import skip_unconfigured
from infergate.inference.ladder import check_context_served, check_rung, runs_for
from infergate.plan.model import Inference

pytestmark = [pytest.mark.xdist_group("deployment"), pytest.mark.usefixtures("inference_report")]

OFF = "inference.ladder.enabled is false"
UNKNOWN = (
    "no context length to climb: the plan's engine.flags set none (--max-model-len, SGLang "
    "--context-length) and GET /v1/models names no max_model_len"
)


def climbed(ladder: Climb, plan: Inference, config: pytest.Config, overlapping: bool) -> list:
    """The rungs to judge; the test skipped where the plan turns the ladder off or no
    context length is known."""
    if not plan.ladder.enabled:
        pytest.skip(OFF)
    if ladder.context is None:
        skip_unconfigured(config, UNKNOWN)
    if overlapping and plan.ladder.overlapping < 2:
        pytest.skip(f"inference.ladder.overlapping is {plan.ladder.overlapping}")
    return runs_for(ladder.runs, overlapping)


def test_planned_context_is_served(ladder: Climb, served_by: ServedBy) -> None:
    """The server serves at least the context length the plan's engine flags give it."""
    if ladder.planned is None:
        pytest.skip("the plan's engine.flags set no context length: the ladder climbs the served")
    served_by.fail(check_context_served(ladder.planned, ladder.served))


def test_each_context_rung_completes(
    ladder: Climb, inference_plan: Inference, served_by: ServedBy, pytestconfig: pytest.Config
) -> None:
    """One request at each rung of the context length completes, with the prompt tokens
    planned in the server's own count and every answer token (ignore_eos)."""
    runs = climbed(ladder, inference_plan, pytestconfig, overlapping=False)
    served_by.fail([p for run in runs for p in check_rung(run)])


def test_overlapping_requests_at_the_top_complete(
    ladder: Climb, inference_plan: Inference, served_by: ServedBy, pytestconfig: pytest.Config
) -> None:
    """inference.ladder.overlapping requests at once at the top rung all complete, each with
    its planned token counts."""
    runs = climbed(ladder, inference_plan, pytestconfig, overlapping=True)
    served_by.fail([p for run in runs for p in check_rung(run)])
