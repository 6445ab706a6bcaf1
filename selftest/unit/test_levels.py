"""--level: the real suite collected on a plan no run can reach, at each level; the checks
above it deselected in one line, the default the standard level, a wrong value refused."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from infergate.catalogue import CHECKS, TIERS
from infergate.cli import make_parser, pytest_argv
from infergate.fixtures.levels import above
from selftest.suite import PHASE_DIRS, PROJECT_CONFIG, closed_plan, run_suite


def collected(pytester: pytest.Pytester, *args: str) -> tuple[set[str], str]:
    """The check names selected by a --collect-only run of the preflight, and its output."""
    plan = closed_plan(pytester.path)
    result = pytester.runpytest_subprocess(
        *PROJECT_CONFIG, "--collect-only", f"--inventory={plan}", "-m", "preflight",
        *args, *PHASE_DIRS,
    )  # fmt: skip
    out = result.stdout.str()
    names = {m.group(1) for m in re.finditer(r"<Function (test_\w+)", out)}
    return names, out + result.stderr.str()


def tiers_up_to(level: str) -> set[str]:
    return {n for n, e in CHECKS.items() if TIERS.index(e.tier) <= TIERS.index(level)}


def test_quick_selects_the_quick_checks_and_says_how_many_went(pytester: pytest.Pytester):
    names, out = collected(pytester, "--level=quick")
    quick = {n for n, e in CHECKS.items() if e.tier == "quick"}
    assert names == quick, out
    assert "test_probe_container_runs" not in names
    assert "test_model_content_identical_on_every_node" not in names
    assert re.search(r"level quick: \d+ checks of higher tiers deselected", out), out
    assert "infergate: level quick (checks of tiers quick; model hash: none)" in out


def test_default_is_standard_and_deselects_the_full_tier_only(pytester: pytest.Pytester):
    default, out = collected(pytester)
    standard, _ = collected(pytester, "--level=standard")
    assert default == standard
    full = {n for n, e in CHECKS.items() if e.tier == "full"}
    assert full
    assert not default & full
    assert re.search(r"level standard: \d+ checks of higher tiers deselected", out), out
    assert "infergate: level standard (checks of tiers quick, standard; model hash: cached)" in out
    assert tiers_up_to("standard") >= default


def test_an_explicit_model_hash_keeps_the_hash_check_at_quick(pytester: pytest.Pytester):
    names, _ = collected(pytester, "--level=quick", "--model-hash=cached")
    assert "test_model_content_identical_on_every_node" in names
    assert "test_stack_identical_on_every_node" not in names  # it runs the image


def test_full_hashes_the_whole_model_and_loads_the_gpus(pytester: pytest.Pytester):
    names, out = collected(pytester, "--level=full")
    assert "model hash: full" in out
    assert {"test_gpus_hold_clocks_under_load", "test_dcgm_diag_passes"} <= names


def test_a_wrong_level_is_a_usage_error_naming_the_option(pytester: pytest.Pytester):
    result = pytester.runpytest_subprocess(*PROJECT_CONFIG, "--level=fast", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--level" in result.stderr.str()


def test_the_command_passes_its_level_to_pytest_and_lists_it():
    args, rest = make_parser().parse_known_args(["preflight", "--level", "quick"])
    assert "--level=quick" in pytest_argv("preflight", args.suite, rest)
    assert (
        "--level"
        in make_parser()
        ._subparsers._group_actions[0]
        .choices[  # type: ignore[union-attr]
            "preflight"
        ]
        .format_help()
    )


def test_a_quick_run_names_its_level_in_the_verdict_and_report(pytester: pytest.Pytester):
    run = run_suite(
        pytester, "-m", "preflight", "--level=quick", inventory=closed_plan(pytester.path)
    )
    assert "NOT READY (level quick): 2 root cause(s)" in run.output, run.output
    report = json.loads(next((pytester.path / "reports").glob("*/preflight.json")).read_text())
    assert report["meta"]["level"] == "quick"


def test_a_suite_test_without_a_catalogue_entry_is_kept_at_every_level():
    module = SimpleNamespace(__name__="infergate.tests_preflight.test_own")
    own = SimpleNamespace(
        module=module, originalname="test_not_catalogued", name="", fixturenames=()
    )
    probe = SimpleNamespace(
        module=module, originalname="test_probe_container_runs", name="", fixturenames=()
    )
    for level in TIERS:
        assert not above(own, level)  # type: ignore[arg-type]
    assert above(probe, "quick")  # type: ignore[arg-type]
    assert not above(probe, "standard")  # type: ignore[arg-type]


def test_a_wrong_ini_level_is_a_usage_error_naming_the_key(pytester: pytest.Pytester):
    args = ("-o", "infergate_level=fast", f"--inventory={closed_plan(pytester.path)}")
    result = pytester.runpytest_subprocess(*PROJECT_CONFIG, *args, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "infergate_level: 'fast' is not one of quick, standard, full" in result.stderr.str()
