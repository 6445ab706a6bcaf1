"""SGLang for real in the lab (issue 17): SGLang 0.5.23 on CPU (`infergate-lab/sglang-cpu:
0.5.23`) serves the tiny Qwen3-MoE with tensor parallel 2 across the two lab nodes through the
suite's own adapter (inventories/lab-sglang.yaml): the preflight runs its in-image checks on
the real SGLang (its parser, its model registry, the rendezvous), the deploy waits on
SGLang's real log lines and on rank 0's API, the inference phase runs against it. Rank 1's
/health answers 200 while the cluster does not serve yet, and the suite is not fooled. The
two-Spark report's SGLang failures, each for real: a rendezvous that hangs after the store,
a vLLM flag, a leftover container that unbalances the nodes' memory."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infergate.engines.launch import INIT_BEGAN_REMEDY
from infergate_lab import Lab
from infergate_lab.engine import LabEngine, ensure_engine
from infergate_lab.engine_image import SGLANG
from selftest.lab.test_deploy_lab import (
    JOINED,
    detected_after,
    plan_file,
    run_containers,
    short_sweep,
    suite_args,
)
from selftest.lab.test_forensics_lab import stacks_named
from selftest.suite import ROOT, SuiteRun, run_folder_in, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

PLAN = ROOT / "inventories" / "lab-sglang.yaml"
NODES = ("node1", "node2")
BALANCE = "test_memory.py::test_memory_balanced_across_nodes"
AFTER = "test_ports.py::test_ports_after_rendezvous_reachable_between_nodes"
RAILS = "test_fabric_health.py::test_fabric_rails_carry_planned_bandwidth"
FLAGS = "test_in_image.py::test_engine_flags_accepted_by_image"
ARCH = "test_in_image.py::test_model_architecture_supported_by_image"
RENDEZVOUS = "test_in_image.py::test_rendezvous_all_reduce_across_nodes"
UNKNOWN_MODEL = "test_conformance.py::test_bad_request_gets_a_json_4xx[unknown-model]"

# Polls rank 1's /health (node2) and rank 0's /health_generate (node1) twice a second from
# the suite's start, and notes when the deploy's first test runs (the launch was ready)
HEALTH_WATCH = """
import json, threading, time, urllib.request, urllib.error

samples, stop, ready = [], threading.Event(), []

def status(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0

def poll():
    while not stop.wait(0.5):
        samples.append((time.monotonic(), status("http://10.251.0.12:8000/health"),
                        status("http://10.251.0.11:8000/health_generate")))

def pytest_configure(config):
    threading.Thread(target=poll, daemon=True).start()

def pytest_runtest_call(item):
    if item.nodeid.startswith("tests_deploy") and not ready:
        ready.append(time.monotonic())

def pytest_unconfigure(config):
    stop.set()
    with open("health-timeline.json", "w") as f:
        json.dump({"samples": samples, "ready": ready[0] if ready else None}, f)
"""


@pytest.fixture(scope="module")
def sglang(engine: LabEngine, lab: Lab) -> LabEngine:
    """The SGLang image on every node (built once per machine, ~7 min cold, then cached
    under /var/cache/infergate); the models came with the lab's vLLM engine."""
    return ensure_engine(lab, models=False, say=print, recipe=SGLANG)


def short_plan(tmp_path: Path, **thresholds: int) -> Path:
    """The SGLang plan with a short sweep and THRESHOLDS changed."""

    def change(plan: dict) -> None:
        plan["thresholds"].update(thresholds)
        short_sweep(plan)

    return plan_file(tmp_path, change, base=PLAN)


def suite(pytester: pytest.Pytester, plan: Path, *args: str) -> SuiteRun:
    return run_suite(pytester, *suite_args(pytester, *args), inventory=plan)


def test_sglang_serves_tp2_across_nodes_green_from_preflight_to_inference(
    sglang, engine_lab, pytester, tmp_path
):
    pytester.makepyfile(health_watch=HEALTH_WATCH)
    phases = "preflight or deploy or inference"
    run = suite(pytester, short_plan(tmp_path), "-m", phases, "-p", "health_watch")
    assert run.red() == set(), run.output
    passed = {t for t, o in run.outcomes.items() if o.status == "passed"}
    # the preflight ran SGLang's own parser, registry and rendezvous in its image
    assert {f"{FLAGS}[{n}]" for n in NODES} | {f"{ARCH}[{n}]" for n in NODES} <= passed
    assert RENDEZVOUS in passed
    assert {f"test_deploy.py::test_rank_is_alive[{n}]" for n in NODES} <= passed
    assert "test_conformance.py::test_openai_client_works_end_to_end" in passed
    assert "serving_base.py" in run.outcomes[UNKNOWN_MODEL].message  # SGLang's design, named
    report = run_folder_in(pytester.path / "report")
    log = (report / "deploy.log").read_text()
    for node, where in (("node1", "10.251.0.11"), ("node2", "10.251.0.12")):
        assert f"{node} ({where}): distributed init" in log, log  # "Init parallel ends."
        assert f"{node} ({where}): weights loaded" in log, log
    assert "API ready: /health_generate, /v1/models answer" in log, log
    assert "engine /metrics: none recorded" not in run.output  # --enable-metrics
    assert run_containers(engine_lab) == {}

    # rank 1's /health said 200 while rank 0 could not generate: the deploy waited past it
    timeline = json.loads((pytester.path / "health-timeline.json").read_text())
    ready, samples = timeline["ready"], timeline["samples"]
    fooled = [t for t, rank1, rank0 in samples if rank1 == 200 and rank0 != 200 and t < ready]
    assert fooled, samples
    served = [t for t, _, rank0 in samples if rank0 == 200]
    assert served, samples
    assert min(served) <= ready

    # the API gate asked rank 0 about once a second, not at every line of its access log
    head_log = (report / "evidence" / "node1" / "container.log").read_text()
    asked = head_log.count("GET /health_generate")
    waited = float(re.search(r"\[\s*([\d.]+) s\] ready:", log).group(1))  # type: ignore[union-attr]
    assert asked <= 2 * waited + 60, (asked, waited)


def test_rendezvous_hang_after_the_store_is_named_before_launch_and_within_the_deadline(
    sglang, engine_lab, pytester, tmp_path
):
    """node1 lets only the dist-init port in: the store answers (the preflight's rendezvous
    check and the dist-init port check pass), the ranks' own connections to node1 do not."""
    engine_lab.apply_fault("firewall-after-rendezvous", "node1", "29501")
    plan = short_plan(tmp_path, dist_init_timeout_s=60)
    before = suite(pytester, plan, "-m", "preflight and not image")
    assert before.red() == {AFTER, RAILS}, before.output
    assert "node1 (10.251.0.11)" in before.message(AFTER)
    assert "node2 (" not in before.message(AFTER)
    assert "iptables drops/rejects with `-A INPUT -i fab0" in before.message(AFTER)

    run = suite(pytester, plan, "-m", "deploy")
    message = run.message(JOINED)
    assert "failed at `distributed init`" in message, message
    for where in ("node1 (10.251.0.11)", "node2 (10.251.0.12)"):
        assert f"{where}: 1 problem(s)\n  - found no `distributed init` line after 60 s" in message
    assert INIT_BEGAN_REMEDY in message
    assert "Init parallel begin." in message  # the tails show how far each rank got
    assert 60 <= detected_after(message) < 60 + 5
    stacks_named(message)  # the hang forensics
    assert run_containers(engine_lab) == {}


def test_sglang_parser_rejects_a_vllm_flag_and_takes_language_model_only(
    sglang, engine_lab, pytester, tmp_path
):
    """The two-Spark report's SGLang rejected --language-model-only; 0.5.23's parser takes
    it (a flag of its own since), and rejects --enforce-eager, which only vLLM has."""
    flags = ["--language-model-only", "--enforce-eager"]
    path = plan_file(tmp_path, lambda p: p["engine"]["flags"].extend(flags), base=PLAN)
    run = suite(pytester, path, "-m", "preflight", "-k", "flags_accepted or architecture")
    assert run.red() == {f"{FLAGS}[{n}]" for n in NODES}, run.output
    text = run.message(f"{FLAGS}[node2]")
    assert "node2 (10.251.0.12)" in text
    assert "sglang in the image rejects --enforce-eager: it is a vLLM flag" in text
    assert "--language-model-only" not in text


def test_leftover_container_unbalancing_memory_is_named_before_launch(
    sglang, engine_lab, pytester, tmp_path
):
    """SGLang refuses to start below 0.9 of the best rank's memory, but on this cgroup v1
    machine it cannot see a neighbour's memory (it reads /sys/fs/cgroup/memory.max, cgroup
    v2's, else the host's): the preflight is what names the node."""
    engine_lab.apply_fault("foreign-container", "node2", "1.2")
    run = suite(pytester, short_plan(tmp_path), "-m", "preflight and not image", "-k", "memory")
    assert run.red() == {BALANCE}, run.output
    text = run.message(BALANCE)
    assert "node2 (10.251.0.12)" in text
    assert "node1 (" not in text
    assert "SGLang refuses to start below 0.9: 'memory capacity is unbalanced'" in text
