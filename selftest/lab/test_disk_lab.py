"""The disk and offline checks against the real lab: green when healthy; a node really short
of space where its compile cache lives is red, naming that node; a plan that names a hub id,
or leaves a node that does not reach the hub online, is red on the nodes it concerns.

The lab's hub is a lab address (inventories/lab.yaml: HF_ENDPOINT on the head's fabric
address, port 9, where nothing listens): no dial leaves the lab."""

from __future__ import annotations

import pytest

from selftest.lab.test_preflight_lab import NODES, on, with_plan
from selftest.suite import SuiteRun, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]

DISK = "test_disk.py::test_disk_room_for_image_model_and_caches"
SHARED = "test_disk.py::test_compile_caches_not_shared_between_nodes"
TOKENIZER = "test_offline.py::test_tokenizer_is_a_local_path"
OFFLINE = "test_offline.py::test_hub_offline_mode_where_the_hub_is_unreachable"
CACHE = "/root/.cache/vllm"  # the lab plan's compile-cache volume
HUB_PORT = "18080"  # where the test's own listener plays the hub


def disk_and_offline(pytester, **kwargs) -> SuiteRun:
    return run_suite(
        pytester, "-m", "preflight and not image", "-k", "test_disk or test_offline", **kwargs
    )


def test_healthy_lab_green(engine_lab, pytester):
    run = disk_and_offline(pytester)
    expected = on(DISK, *NODES) | on(TOKENIZER, *NODES) | {SHARED, OFFLINE}
    assert {t for t, o in run.outcomes.items() if o.status == "passed"} == expected, run.output


def test_compile_cache_short_of_space_names_the_node(engine_lab, pytester):
    engine_lab.apply_fault("disk-full", "node2", CACHE, "0.5")
    run = disk_and_offline(pytester)
    assert run.red() == on(DISK, "node2"), run.output
    text = run.message(f"{DISK}[node2]")
    assert "node2 (10.251.0.12)" in text
    assert f"0.5 GiB free on {CACHE} (overlay disk-full)" in text
    assert "at least 4 GiB free there: 4 GiB JIT headroom (VLLM_CACHE_ROOT)" in text
    assert f"`du -xh -d 2 {CACHE} | sort -h | tail`" in text


def test_tokenizer_hub_id_is_red_on_every_node(engine_lab, pytester, tmp_path):
    hub_id = "HuggingFaceTB/SmolLM2-135M-Instruct"
    plan = with_plan(tmp_path, lambda p: p["engine"]["flags"].extend(["--tokenizer", hub_id]))
    run = disk_and_offline(pytester, inventory=plan)
    assert run.red() == on(TOKENIZER, *NODES), run.output
    text = run.message(f"{TOKENIZER}[node2]")
    assert "node2 (10.251.0.12)" in text
    assert f"--tokenizer {hub_id}, a hub id (this node does not reach http://10.252.0.11:9" in text
    assert f"hf download {hub_id} --local-dir /srv/models/SmolLM2-135M-Instruct/tokenizer" in text


def test_online_mode_without_the_hub_is_red_and_says_who_reaches_it(engine_lab, pytester, tmp_path):
    def online(plan: dict) -> None:
        del plan["engine"]["env"]["HF_HUB_OFFLINE"]

    run = disk_and_offline(pytester, inventory=with_plan(tmp_path, online))
    assert run.red() == {OFFLINE}, run.output
    text = run.message(OFFLINE)
    for where in ("node1 (10.251.0.11)", "node2 (10.251.0.12)"):
        assert where in text
    assert "no node reaches it, and HF_HUB_OFFLINE is not 1" in text
    assert 'set HF_HUB_OFFLINE: "1" in engine.env' in text

    # a hub that answers (a listener on the head plays it): online mode is fine, and a hub id
    # says the node reaches it
    engine_lab.apply_fault("port-taken", "node1", HUB_PORT)

    def reachable(plan: dict) -> None:
        online(plan)
        plan["engine"]["env"]["HF_ENDPOINT"] = f"http://10.252.0.11:{HUB_PORT}"
        plan["engine"]["flags"].extend(["--tokenizer", "org/name"])

    run = disk_and_offline(pytester, inventory=with_plan(tmp_path, reachable))
    assert run.red() == on(TOKENIZER, *NODES), run.output
    assert f"this node reaches http://10.252.0.11:{HUB_PORT})" in run.message(f"{TOKENIZER}[node2]")
