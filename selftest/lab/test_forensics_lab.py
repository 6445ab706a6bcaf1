"""Hang forensics for real (issue 29 part 4): the firewall-after-rendezvous fault on both
nodes hangs the lab's TP 2 vLLM launch inside torch.distributed's init; before the teardown
every process of both nodes' containers is dumped with py-spy (the lab puts it in each node's
~/.local/bin), the stacks and last log lines land under evidence/NODE/, the failure names the
frame each rank waits in, and nothing is left running. SGLang's is test_sglang_lab's hang.
A request that hangs after ready (node2's rank frozen) gets the same, as stacks-endpoint.txt
for the endpoint's first request, stacks-load-c2.txt for a level of the load, which then ends."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from infergate.deploy.stacks import HUNG, WAITS
from infergate.engines.labels import RUN_LABEL
from infergate.reports.inference_json import read_results
from selftest.lab.test_deploy_lab import (
    NODES,
    SHORT,
    deploy,
    detected_after,
    launch_failure,
    plan_file,
    run_containers,
    short_sweep,
    suite_args,
)
from selftest.suite import run_folder_in, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

# the plan's init deadline here: past the ranks' start-up (still importing at 30 s on this
# 2-core AVX2 machine), before the engine's own timeout gives up on the hang (raised to 600 s)
DIST_INIT_S = 90


def hangs_longer(plan: dict) -> None:
    """The init deadline DIST_INIT_S, and vLLM's own --distributed-timeout-seconds 600."""
    plan["thresholds"]["dist_init_timeout_s"] = DIST_INIT_S
    flags = plan["engine"]["flags"]
    flags[flags.index("--distributed-timeout-seconds") + 1] = "600"


WHERE = {"node1": "node1 (10.251.0.11)", "node2": "node2 (10.251.0.12)"}


def stacks_named(message: str, frames_in: tuple[str, ...] = ("torch/distributed/",)) -> None:
    """Each node's stacks and last lines kept in the evidence the message names, and a
    rank's frame in FRAMES_IN named on each node, every line pointing there."""
    found = re.search(r"^evidence: (.+)$", message, re.MULTILINE)
    assert found, message
    evidence = Path(found.group(1))
    for node in NODES:
        stacks = (evidence / node / "stacks.txt").read_text()
        assert "# py-spy ran on the node, as root, against the container's host pids" in stacks
        assert '"MainThread"' in stacks, stacks
        assert (evidence / node / "last-lines.txt").read_text().strip()
        rank = f"{WHERE[node]} pid "
        named = [ln for ln in message.splitlines() if ln.strip().startswith(rank)]
        waits = [ln for ln in named if "waiting in " in ln]
        assert any(p in ln for ln in waits for p in frames_in), message
        assert all(ln.endswith(f"stacks: evidence/{node}/stacks.txt") for ln in named), named


def test_vllm_hang_at_init_names_the_frame_each_rank_waits_in(engine_lab, pytester, tmp_path):
    for node in NODES:
        engine_lab.apply_fault("firewall-after-rendezvous", node, "29501")
    plan = plan_file(tmp_path, hangs_longer)
    message = launch_failure(deploy(pytester, plan))
    assert "failed at `distributed init`" in message, message
    assert WAITS in message
    # this 2-core machine, shared with other runs, had the workers still importing at 90 s
    # (docs/forensics.md#measured-in-the-lab): the engine's own frames, or torch's
    stacks_named(message, ("torch/distributed/", "vllm/"))
    assert DIST_INIT_S <= detected_after(message) < DIST_INIT_S + 5
    assert run_containers(engine_lab) == {}


# node2's engine container frozen (`docker pause`) while the endpoint root's first request
# is sent, thawed after: the request hangs on the head's all-reduce with the frozen rank
FREEZER = f"""
import pytest
from infergate_lab import Lab

RUN = "$(docker ps -q --filter label={RUN_LABEL})"

@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.argname != "served":
        return (yield)
    lab = Lab()
    lab.ssh("node2", [f"docker pause {{RUN}}"])
    try:
        return (yield)
    finally:
        lab.ssh("node2", [f"docker unpause {{RUN}}"])
"""
ROOT_CHECK = "test_conformance.py::test_endpoint_serves_one_request"
# a request's deadline in these plans: a lab request answers in seconds, a hung one never
REQUEST_S = 30


def waits_past_the_request(plan: dict, concurrency: Sequence[int] = (1, SHORT)) -> None:
    """vLLM's own collective timeout (600 s) past the request's deadline, REQUEST_S: a hang,
    not an error; a short sweep at CONCURRENCY."""
    short_sweep(plan, concurrency)
    plan["inference"]["request_timeout_s"] = REQUEST_S
    flags = plan["engine"]["flags"]
    flags[flags.index("--distributed-timeout-seconds") + 1] = "600"


def test_request_hung_after_ready_names_where_each_rank_waits(engine_lab, pytester, tmp_path):
    pytester.makepyfile(freezer=FREEZER)
    plan = plan_file(tmp_path, waits_past_the_request)
    args = ("-m", "inference", "-k", "test_endpoint_serves_one_request", "-p", "freezer")
    run = run_suite(pytester, *suite_args(pytester, *args), inventory=plan)
    assert run.red() == {ROOT_CHECK}, run.output
    message = run.message(ROOT_CHECK)
    assert "IG-ENDPOINT-TIMEOUT" in message, message
    assert f"{WAITS} " in message, message
    assert f"fix: {HUNG}" in message, message  # ready, then hung: no "wait longer"
    evidence = run_folder_in(pytester.path / "report") / "evidence"
    for node in NODES:
        stacks = (evidence / node / "stacks-endpoint.txt").read_text()
        assert '"MainThread"' in stacks, stacks
        assert (evidence / node / "last-lines-endpoint.txt").read_text().strip()
        named = re.findall(rf"{re.escape(WHERE[node])} pid \d+ [^|]*", message)
        assert named, message
        assert all(f"stacks: evidence/{node}/stacks-endpoint.txt" in n for n in named), named
    # the head's ranks wait on the frozen one, in a collective or the engine's own step
    head = re.findall(rf"{re.escape(WHERE['node1'])} pid \d+ [^|]*waiting in [^|]*", message)
    assert any(p in n for n in head for p in ("torch/distributed/", "vllm/")), message
    assert run_containers(engine_lab) == {}


# node2's engine container frozen while the load's second level runs (the warm-up and c = 1
# answered), thawed once the sweep ends: its stacks are taken while it is frozen
SWEEP_FREEZER = f"""
import pytest
from infergate.fixtures import endpoint
from infergate_lab import Lab

RUN = "$(docker ps -q --filter label={RUN_LABEL})"
measure = endpoint.run_level
levels = []

def run_level(*args, **kwargs):
    levels.append(args)
    if len(levels) == 2:
        Lab().ssh("node2", [f"docker pause {{RUN}}"])
    return measure(*args, **kwargs)

endpoint.run_level = run_level

@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.argname != "sweep":
        return (yield)
    try:
        return (yield)
    finally:
        Lab().ssh("node2", [f"docker unpause {{RUN}}"])
"""
LEVELS = [f"test_performance.py::test_every_request_completes[c={c}]" for c in (1, 2)]


def test_load_hung_mid_sweep_names_where_each_rank_waits_and_ends_the_sweep(
    engine_lab, pytester, tmp_path
):
    """c = 1 answered, c = 2 hung: c = 2 is the one red, naming where each rank waits; the
    sweep ends there, and every later check of the endpoint's is skipped naming it."""
    pytester.makepyfile(freezer=SWEEP_FREEZER)
    plan = plan_file(tmp_path, lambda p: waits_past_the_request(p, (1, 2, 4)))
    args = ("-m", "inference", "-k", "test_performance", "-p", "freezer")
    run = run_suite(pytester, *suite_args(pytester, *args), inventory=plan)
    assert run.red() == {LEVELS[1]}, run.output
    assert run.outcomes[LEVELS[0]].status == "passed", run.output
    message = run.message(LEVELS[1])
    assert f"{WAITS} " in message, message
    assert f"fix: {HUNG}" in message, message
    evidence = run_folder_in(pytester.path / "report") / "evidence"
    for node in NODES:
        assert '"MainThread"' in (evidence / node / "stacks-load-c2.txt").read_text()
    tests = list(run.outcomes)
    # after c = 2, every check but those of c = 1, measured before the hang
    later = [t for t in tests[tests.index(LEVELS[1]) + 1 :] if not t.endswith("[c=1]")]
    named = "node1 (10.251.0.11) stopped serving during the run: answered nothing in time"
    assert len(later) == 7, tests  # the roofline judges a sweep that ended early
    assert all(
        run.message(t).startswith(f"not checked: {named} (test_every_request_completes[c=2])")
        for t in later
    ), run.output
    results = read_results(run_folder_in(pytester.path / "report") / "results.json")
    assert [lv.label for lv in results.levels] == ["c=1", "c=2"]  # c = 4 never sent
    assert run_containers(engine_lab) == {}
