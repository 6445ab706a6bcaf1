"""Failure detection (issue 29 part 3) without a cluster: the chaos actions' node commands,
the rank end states, the judge and its message, the report's table, and that only a -m naming
chaos selects the chaos tests. The lab runs them for real (selftest/lab/test_chaos_lab.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from fixtures.chaos import as_root
from infergate.deploy import chaos
from infergate.deploy.chaos import Blind, RankEnd, Seen, Timeline, check_detection, rank_end
from infergate.deploy.watch import Process
from infergate.engines.registry import engine_for
from infergate.plan.model import Chaos, Node, Ssh, parse_inventory
from infergate.problems import describe_all
from infergate.reports.inference import ReportMeta, Results
from infergate.reports.inference_html import render_html
from infergate.reports.inference_json import read_results, render_json
from selftest.suite import ROOT

TP2 = ROOT / "inventories" / "lab-moe-tp2.yaml"
DATA = ROOT / "selftest" / "data" / "chaos"
VLLM = engine_for("vllm")
BLIND = Blind(VLLM.health_issue, VLLM.liveness_probe)
WORKER = "node2 (10.251.0.12)"


def timeline(health: float | None, generation: float | None = 2.0) -> Timeline:
    noticed = {
        "health": None if health is None else Seen(health, "HTTP 500"),
        "models": None,
        "generation": None if generation is None else Seen(generation, "HTTP 500"),
    }
    ranks = (
        RankEnd("node1 (10.251.0.11)", "running", "every process alive"),
        RankEnd(WORKER, "exited", "container exited, exit code 137"),
    )
    last = {"health": "HTTP 200", "models": "HTTP 200", "generation": "HTTP 200"}
    load = ("failed, its last event +0.3 s from the action: stream cut",)
    return Timeline("kill", WORKER, 60.0, noticed, last, load, ranks)


# --- the actions' commands ---------------------------------------------------------------


def test_kill_is_docker_kill_and_leaves_the_removal_to_the_run() -> None:
    s = chaos.strike("kill", "infergate-node2-r1", "fab0", 20)
    assert (s.apply, s.undo) == ("docker kill infergate-node2-r1", "")


def test_pause_is_undone_by_unpause_even_after_a_failure() -> None:
    s = chaos.strike("pause", "infergate-node2-r1", "fab0", 20)
    assert s.apply == "docker pause infergate-node2-r1"
    assert s.undo == "docker unpause infergate-node2-r1 2>/dev/null || true"


def test_the_cut_is_restored_by_the_node_itself_on_the_fabric_alone() -> None:
    """The node brings the link back after cut_s even if the controller dies mid-cut; the
    command detaches, so the SSH session that started it returns at once."""
    s = chaos.strike("cut", "c", "enp1s0f1np1", 20)
    assert s.apply == (
        "nohup setsid sh -c 'ip link set enp1s0f1np1 down && sleep 20; ip link set "
        "enp1s0f1np1 up' </dev/null >/dev/null 2>&1 &"
    )
    assert s.undo == "ip link set enp1s0f1np1 up"


def test_the_cut_goes_through_sudo_for_a_user_other_than_root() -> None:
    node = _node("ubuntu")
    s = as_root(chaos.strike("cut", "c", "fab0", 5), node)
    assert s.apply.startswith("sudo -n sh -c 'nohup setsid sh -c '")
    assert s.undo == "sudo -n ip link set fab0 up"
    assert as_root(chaos.strike("kill", "c", "fab0", 5), node).apply == "docker kill c"


# --- the ranks' end states --------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "gone", "serving", "state"),
    [
        ("exited", [], False, "exited"),
        ("missing", [], False, "exited"),
        ("paused", [], False, "paused"),
        ("running", [Process(4711, "VLLM::Worker_TP1")], True, "partly dead"),
        ("running", [], False, "hung"),
        ("running", [], True, "running"),
    ],
)
def test_a_rank_ends_exited_paused_partly_dead_hung_or_running(
    status: str, gone: list[Process], serving: bool, state: str
) -> None:
    assert rank_end(WORKER, status, 137, gone, serving).state == state


# --- the judge --------------------------------------------------------------------------


def test_health_that_stays_200_is_red_naming_the_engine_issue_and_a_better_probe() -> None:
    [problem] = check_detection(timeline(health=None), Chaos(), BLIND)
    assert "/health: did not notice in 60 s (last: HTTP 200)" in problem.found
    assert "a generation: noticed after 2.0 s (HTTP 500)" in problem.found
    assert f"rank {WORKER}: exited (container exited, exit code 137)" in problem.found
    assert "chaos.max_health_detect_s" in problem.planned
    assert "vllm#11996" in problem.remedy
    assert "https://github.com/vllm-project/vllm/issues/11996" in problem.remedy
    assert "(here a generation noticed)" in problem.remedy


def test_sglang_names_its_own_issue_and_health_generate() -> None:
    sglang = engine_for("sglang")
    blind = Blind(sglang.health_issue, sglang.liveness_probe)
    [problem] = check_detection(timeline(health=None), Chaos(), blind)
    assert "sglang#4780" in problem.remedy
    assert "/health_generate" in problem.remedy


def test_health_within_the_limit_is_green_and_a_late_one_red() -> None:
    assert check_detection(timeline(health=3.0), Chaos(), BLIND) == []
    [late] = check_detection(timeline(health=45.0), Chaos(max_health_detect_s=30), BLIND)
    assert "noticed only after 45.0 s, past 30 s" in late.found


def test_the_generation_gate_is_judged_only_where_set() -> None:
    noticed = timeline(health=3.0, generation=None)
    assert check_detection(noticed, Chaos(), BLIND) == []
    [problem] = check_detection(noticed, Chaos(max_generation_detect_s=10), BLIND)
    assert "chaos.max_generation_detect_s" in problem.planned


def test_the_lab_kill_run_reads_as_recorded() -> None:
    """The lab's kill (selftest/data/chaos/vllm-tp2-kill.txt): its figures, judged again,
    give the recorded message word for word: /health blind for all of observe_s, a
    generation timed out at 5.0 s, the head hung and node2 exited 137."""
    recorded = (DATA / "vllm-tp2-kill.txt").read_text().rstrip("\n")
    load = tuple(
        line.removeprefix("    request in flight: ")
        for line in recorded.splitlines()
        if line.startswith("    request in flight: ")
    )
    timed_out = "no answer from http://10.251.0.11:8000/v1: TimeoutError: timed out"
    noticed = {"health": None, "models": None, "generation": Seen(5.0, timed_out)}
    last = {"health": "HTTP 200", "models": "HTTP 200", "generation": "HTTP 200"}
    ranks = (
        RankEnd(
            "node1 (10.251.0.11)", "hung", "every process alive, the cluster does not generate"
        ),
        RankEnd(WORKER, "exited", "container exited, exit code 137"),
    )
    t = Timeline("kill", WORKER, 20.0, noticed, last, load, ranks)
    limits = Chaos(observe_s=20, max_health_detect_s=15, max_generation_detect_s=15)
    assert describe_all(WORKER, check_detection(t, limits, BLIND)) == recorded


def test_the_lab_kill_with_40_s_of_probes_shows_health_late_not_blind() -> None:
    """The lab's kill watched 40 s (selftest/data/chaos/vllm-tp2-kill-40s.json, results.json's
    timeline): /health went 503 at 22.5 s, once the head's EngineCore gave up; within the
    default 30 s gate that is green, within the lab's 15 s red."""
    t = chaos.from_dict(json.loads((DATA / "vllm-tp2-kill-40s.json").read_text()))
    assert check_detection(t, Chaos(), BLIND) == []
    [late] = check_detection(t, Chaos(max_health_detect_s=15), BLIND)
    assert "so /health noticed only after 22.5 s, past 15 s" in late.found
    assert "rank node1 (10.251.0.11): partly dead (gone since ready: 32099 VLLM::EngineCore" in (
        late.found
    )


def test_the_lab_kill_on_an_idle_machine_is_noticed_sooner_and_ends_every_rank() -> None:
    """The same kill in CI on an idle machine (selftest/data/chaos/vllm-tp2-kill-idle.json):
    /health went 503 after 12.0 s, not 22.5; still past the lab test's 5 s gate."""
    t = chaos.from_dict(json.loads((DATA / "vllm-tp2-kill-idle.json").read_text()))
    assert check_detection(t, Chaos(max_health_detect_s=15), BLIND) == []
    [late] = check_detection(t, Chaos(max_health_detect_s=5), BLIND)
    assert "so /health noticed only after 12.0 s, past 5 s" in late.found
    assert "rank node1 (10.251.0.11): exited (container exited, exit code 0)" in late.found


# --- the report -------------------------------------------------------------------------


def test_results_json_keeps_the_timelines_and_the_page_shows_them(tmp_path: Path) -> None:
    results = Results(ReportMeta("lab", "chaos", "m", "t"), (), chaos=(timeline(None),))
    path = tmp_path / "results.json"
    path.write_text(render_json(results))
    assert read_results(path).chaos == results.chaos
    assert json.loads(path.read_text())["chaos"][0]["detect_s"]["generation"] == 2.0
    page = render_html(results)
    assert "<h3>kill on node2 (10.251.0.12)</h3>" in page
    assert "<span class=fail>not in 60 s</span>" in page


# --- opt-in -----------------------------------------------------------------------------

COLLECT = ("--pyargs", "infergate.tests_deploy", "--collect-only", "-q", "-p", "no:cacheprovider")


def test_only_a_marker_expression_naming_chaos_selects_the_chaos_tests(
    pytester: pytest.Pytester,
) -> None:
    def collected(*args: str) -> str:
        return pytester.runpytest_subprocess(*COLLECT, f"--inventory={TP2}", *args).stdout.str()

    default, plain, opted = collected("-m", "deploy"), collected(), collected("-m", "chaos")
    for run in (default, plain):
        assert "test_deploy.py::test_rank_is_alive[node2]" in run
        assert "test_chaos.py" not in run
    assert "test_chaos.py::test_probes_notice_a_killed_rank" in opted
    assert "3/9 tests collected (6 deselected)" in opted
    assert "test_deploy.py" not in opted


def _node(user: str) -> Node:
    node = parse_inventory(yaml.safe_load(TP2.read_text())).nodes[1]
    return replace(node, ssh=Ssh(user=user))
