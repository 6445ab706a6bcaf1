"""Tokens/s and latency under load, measured the way `vllm bench serve` defines them, over
the plan's concurrency sweep (after a warm-up), gated by the plan and by a stored baseline."""

from __future__ import annotations

import pytest

from infergate.fixtures.endpoint import InferenceReport, ServedBy, baseline_key, fail_blocked
from infergate.fixtures.plugin import skip_unconfigured
from infergate.inference import baseline
from infergate.inference.metrics import LevelSummary
from infergate.inference.plan import (
    check_failures,
    check_goodput,
    check_thresholds,
    check_usage_counts_chunks,
    check_usage_reported,
)
from infergate.inference.roofline import RooflineFigures, check_fraction, plan_cause
from infergate.inference.workload import Level, levels
from infergate.plan.model import Inference, Inventory
from infergate.preflight.roots import Blocked

pytestmark = [pytest.mark.xdist_group("deployment"), pytest.mark.usefixtures("inference_report")]


def test_load_prompts_are_built(prompts_root: Blocked | None) -> None:
    """The load's prompts are built, of inference.input_tokens tokens by the served model's
    tokenizer (or from inference.dataset): else this fails once, and the load's checks are
    skipped naming it."""
    fail_blocked(prompts_root)


def summary_of(sweep: list[LevelSummary], plan: Inference, level: Level) -> LevelSummary:
    """The sweep's summary of LEVEL: the sweep runs the plan's levels in their order."""
    return sweep[levels(plan).index(level)]


def test_every_request_completes(
    sweep: list[LevelSummary],
    inference_plan: Inference,
    served_by: ServedBy,
    level: Level,
    inference_report: InferenceReport,
) -> None:
    """At this level (concurrent streams, or arrivals per second), every request completes
    with text and [DONE]; where they hung, the message says where each rank waited."""
    stacks = inference_report.stacks.get(level.label, ())
    served_by.fail(check_failures(summary_of(sweep, inference_plan, level), stacks))


def test_usage_counts_the_streamed_tokens(sweep: list[LevelSummary], served_by: ServedBy) -> None:
    """Every stream reports usage, and never fewer tokens than it streamed chunks (a chunk
    may carry several tokens; the ratio is reported)."""
    problems = check_usage_reported(sweep) + check_usage_counts_chunks(sweep)
    served_by.fail(problems)


def test_throughput_meets_the_plan(
    sweep: list[LevelSummary],
    inference_plan: Inference,
    served_by: ServedBy,
    pytestconfig: pytest.Config,
) -> None:
    """Aggregate output tokens/s at the highest level and median TTFT at concurrency 1 meet
    the plan's floors."""
    plan = inference_plan
    if plan.min_output_tokens_per_s is None and plan.max_ttft_ms is None:
        skip_unconfigured(
            pytestconfig,
            "no thresholds: set inference.min_output_tokens_per_s or inference.max_ttft_ms",
        )
    served_by.fail(check_thresholds(sweep, plan))


def test_goodput_meets_the_slo(
    sweep: list[LevelSummary],
    inference_plan: Inference,
    served_by: ServedBy,
    pytestconfig: pytest.Config,
    level: Level,
) -> None:
    """At this level (concurrent streams, or arrivals per second), at least the planned share
    of requests meets every per-request objective (TTFT, TPOT, E2E), as `vllm bench serve
    --goodput` counts them."""
    slo = inference_plan.slo
    if slo.min_goodput_fraction is None:
        skip_unconfigured(pytestconfig, "no goodput floor: set inference.slo.min_goodput_fraction")
    served_by.fail(check_goodput(summary_of(sweep, inference_plan, level), slo))


def test_performance_holds_against_the_baseline(
    inventory: Inventory,  # first: with --endpoint alone, skipped before the sweep
    sweep: list[LevelSummary],
    served_by: ServedBy,
    pytestconfig: pytest.Config,
    image_id: str,
    model_digest: str,
) -> None:
    """Tokens/s and median TTFT per level are no worse than the stored baseline for this
    hardware, image, model and flags, within inference.baseline_tolerance."""
    path = inventory.inference.baseline
    if path is None:
        skip_unconfigured(pytestconfig, "no baseline file: set inference.baseline")
    key = baseline_key(inventory, image_id, model_digest)
    current = baseline.figures_of(sweep)
    if pytestconfig.getoption("update_baseline"):
        baseline.update(pytestconfig.rootpath / path, key, current)
        return
    stored = baseline.load(pytestconfig.rootpath / path, key)
    if stored is None:
        skip_unconfigured(
            pytestconfig, f"no baseline stored for {key.id}: run once with --update-baseline"
        )
    problems = baseline.compare(current, stored, inventory.inference.baseline_tolerance)
    served_by.fail(problems)


def test_decode_reaches_the_roofline(
    inventory: Inventory,  # first: with --endpoint alone, skipped before the sweep
    sweep: list[LevelSummary],
    roofline_figures: RooflineFigures,
    served_by: ServedBy,
    pytestconfig: pytest.Config,
) -> None:
    """Decode at concurrency 1 (1 / median TPOT) reaches at least inference.roofline.
    min_fraction of the memory-bandwidth ceiling of one stream on the planned topology."""
    floor = inventory.inference.roofline.min_fraction
    if floor is None:
        skip_unconfigured(
            pytestconfig,
            f"no floor: set inference.roofline.min_fraction ({roofline_figures.line()})",
        )
    served_by.fail(check_fraction(roofline_figures, floor, plan_cause(inventory)))
