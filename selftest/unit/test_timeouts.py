"""Each test's pytest-timeout comes from the plan: the real suite collected in process (no
lab, no SSH) with a plan whose deadlines are edited, and a backstop far below them."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from infergate.fixtures.timeouts import AFTER_HASH_S, AFTER_LAUNCH_S, OWN_WORK_S
from infergate.inference.endpoint import REQUEST_TIMEOUT_S
from infergate.plan.model import parse_inventory
from infergate.preflight.in_image import IMPORT_ALLOWANCE_S
from infergate.preflight.model_hash import hash_model
from infergate.preflight.per_node import PerNode
from infergate.remote.http_session import CONNECT_S
from infergate.remote.ssh import NodeUnreachable
from infergate.waiting import Deadline
from selftest.suite import PHASE_DIRS, PROJECT_CONFIG, ROOT

SPARKS = ROOT / "inventories" / "two-sparks-vllm.yaml"
SPARKS_RAY = ROOT / "inventories" / "two-sparks-vllm-ray.yaml"
JOINED = "test_deploy.py::test_every_planned_node_joined"
THROUGHPUT = "test_performance.py::test_throughput_meets_the_plan"
HASHED = "test_model.py::test_model_content_identical_on_every_node"
RENDEZVOUS = "test_in_image.py::test_rendezvous_all_reduce_across_nodes"
PARITY = "test_parity.py::test_stack_identical_on_every_node"
HOST = "test_host.py::test_docker_engine_answers[spark1]"


# The sweep's tests may also make it (the plan's levels 1, 4 and 16, its requests the
# defaults: 64 each): 2 + 3 x 64 prompts built at 1 s each, 2 warm-up requests one at a
# time, then 64 + 16 + 4 waves, each request under 120 s
SWEEP_S = (2 + 3 * 64) * 1.0 + (2 + 64 + 16 + 4) * 120
# The endpoint's root, which every test that talks to the endpoint may make: its wait (the
# plan's default 10 s), the last try's connect timeout, then its one request
ENDPOINT_S = 10 + CONNECT_S + REQUEST_TIMEOUT_S
MODELS = "test_conformance.py::test_models_lists_the_planned_served_name"


def plan_file(tmp_path: Path, base: Path = SPARKS, **thresholds: float) -> Path:
    plan = yaml.safe_load(base.read_text())
    plan["thresholds"].update(thresholds)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def collected_timeouts(pytester: pytest.Pytester, plan: Path, *args: str) -> dict[str, Any]:
    """Each collected test's `timeout` marker seconds (None: the backstop), by file::name."""
    items, _ = pytester.inline_genitems(
        *PROJECT_CONFIG,
        f"--inventory={plan}",
        *args,
        *PHASE_DIRS,
    )
    found = {}
    for item in items:
        mark = item.get_closest_marker("timeout")
        found[item.nodeid.rsplit("/", 1)[-1]] = mark.args[0] if mark else None
    return found


def test_launch_tests_outlast_the_launch_whatever_the_backstop(pytester, tmp_path):
    plan = plan_file(
        tmp_path, dist_init_timeout_s=100, weights_timeout_s=1000, ready_timeout_s=1500
    )
    found = collected_timeouts(pytester, plan, "-o", "timeout=20")
    launch = 1500 + AFTER_LAUNCH_S + OWN_WORK_S
    assert found[JOINED] == launch
    assert found[MODELS] == launch + ENDPOINT_S
    assert found[THROUGHPUT] == launch + SWEEP_S + ENDPOINT_S
    assert found[HOST] is None  # sets nothing up: the backstop is its timeout


def test_the_last_launch_deadline_counts_for_ray(pytester, tmp_path):
    plan = plan_file(tmp_path, SPARKS_RAY, cluster_join_timeout_s=2000, ready_timeout_s=1500)
    found = collected_timeouts(pytester, plan, "-o", "timeout=20")
    assert found[JOINED] == 2000 + AFTER_LAUNCH_S + OWN_WORK_S


def test_the_planned_request_deadline_sets_the_sweeps_and_the_endpoints(pytester, tmp_path):
    """inference.request_timeout_s 30: every request of the sweep, and the root's one."""
    plan = yaml.safe_load(SPARKS.read_text())
    plan["inference"] = {"request_timeout_s": 30}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    found = collected_timeouts(pytester, path, "--endpoint=http://127.0.0.1:9", "-o", "timeout=20")
    sweep = (2 + 3 * 64) * 1.0 + (2 + 64 + 16 + 4) * 30
    assert found[THROUGHPUT] == sweep + 10 + CONNECT_S + 30 + OWN_WORK_S


def test_hash_and_in_image_tests_get_their_plan_deadlines(pytester, tmp_path):
    plan = plan_file(
        tmp_path, model_hash_timeout_s=7200, rendezvous_timeout_s=90, command_timeout_s=10
    )
    found = collected_timeouts(pytester, plan, "-o", "timeout=20")
    hashed = 7200 + AFTER_HASH_S
    in_image = 90 + IMPORT_ALLOWANCE_S + 2 * 10
    assert found[HASHED] == hashed + OWN_WORK_S
    assert found[RENDEZVOUS] == in_image + OWN_WORK_S
    assert found[PARITY] == hashed + in_image + OWN_WORK_S  # it may make both


def test_the_backstop_stays_the_floor_and_off_stays_off(pytester, tmp_path):
    plan = plan_file(tmp_path, ready_timeout_s=1500, rendezvous_timeout_s=90)
    found = collected_timeouts(pytester, plan, "--timeout=1800")
    assert found[JOINED] == 1500 + AFTER_LAUNCH_S + OWN_WORK_S  # above the backstop
    assert found[RENDEZVOUS] is None  # the backstop outlasts the probe: it keeps 1800 s
    found = collected_timeouts(pytester, plan, "--timeout=0")
    assert set(found.values()) == {None}  # pytest-timeout off: no test gets one back


def test_endpoint_given_launches_nothing_so_adds_no_launch_time(pytester, tmp_path):
    plan = plan_file(tmp_path, ready_timeout_s=1500)
    found = collected_timeouts(pytester, plan, "-o", "timeout=20", "--endpoint=http://h:8000")
    assert found[JOINED] is None
    assert found[THROUGHPUT] == SWEEP_S + ENDPOINT_S + OWN_WORK_S


def test_the_endpoint_tests_outlast_its_wait_from_the_plan_or_the_option(pytester, tmp_path):
    plan = plan_file(tmp_path, endpoint_wait_s=900)
    given = ("-o", "timeout=20", "--endpoint=http://h:8000")
    found = collected_timeouts(pytester, plan, *given)
    assert found[MODELS] == 900 + CONNECT_S + REQUEST_TIMEOUT_S + OWN_WORK_S
    found = collected_timeouts(pytester, plan, *given, "--endpoint-wait=2000")
    assert found[MODELS] == 2000 + CONNECT_S + REQUEST_TIMEOUT_S + OWN_WORK_S


OWN_MARKED = """
import pytest

@pytest.mark.timeout(99999)
def test_long(deployment):
    pass

@pytest.mark.timeout(30)
def test_short(deployment):
    pass
"""


def test_a_tests_own_timeout_is_kept_only_when_longer(pytester, tmp_path):
    pytester.makepyfile(test_own=OWN_MARKED)
    plan = plan_file(tmp_path, ready_timeout_s=1500)
    found = collected_timeouts(pytester, plan, "-o", "timeout=20", str(pytester.path))
    assert found["test_own.py::test_long"] == 99999
    assert found["test_own.py::test_short"] == 1500 + AFTER_LAUNCH_S + OWN_WORK_S


def test_header_and_help_say_where_the_timeouts_come_from(pytester, tmp_path):
    plan = plan_file(tmp_path, ready_timeout_s=1500, model_hash_timeout_s=7200)
    args = ("-c", str(ROOT / "pytest.ini"), "--rootdir", str(ROOT), f"--inventory={plan}")
    header = pytester.runpytest_inprocess(*args, "-o", "timeout=20", "--co", *PHASE_DIRS)
    header.stdout.fnmatch_lines(
        [
            f"infergate: per-test timeouts from the plan: launch {1500 + AFTER_LAUNCH_S:g} s, *"
            f"model hash {7200 + AFTER_HASH_S:g} s, *; backstop 20 s*",
        ]
    )
    helped = pytester.runpytest_inprocess(*args, "--help", *PHASE_DIRS)
    # argparse wraps the help, at a hyphen too (`per-` / `test`)
    text = re.sub(r"-\s+", "-", " ".join(helped.stdout.str().split()))
    assert "the header's `infergate: per-test timeouts` line" in text


def test_the_remote_hash_runs_under_the_plans_deadline():
    plan = yaml.safe_load(SPARKS.read_text())
    plan["thresholds"]["model_hash_timeout_s"] = 7200
    inventory = parse_inventory(plan)
    seen: list[Deadline] = []

    def read(command: str, what: str, limit: Deadline, look: str, on_err: object) -> None:
        seen.append(limit)
        raise NodeUnreachable("recorded")

    remotes = {n.name: SimpleNamespace(read=read, node=n) for n in inventory.nodes}
    PerNode(remotes, hash_model(inventory, "cached", print)).every()  # type: ignore[arg-type]
    assert seen == [Deadline(7200, "thresholds.model_hash_timeout_s")] * 2


LAST_TEARS_DOWN = """
import time

import pytest

@pytest.fixture(scope="session")
def deployment():
    yield "up"
    time.sleep(3)  # the evidence and the removal, at the end of the run

def test_launches(deployment):
    pass

def test_host_check():  # the last test: the deployment is removed in its teardown
    pass
"""


def test_the_last_test_outlasts_the_runs_teardown(pytester, tmp_path):
    pytester.makepyfile(test_last=LAST_TEARS_DOWN)
    done = pytester.runpytest_subprocess(
        *PROJECT_CONFIG,
        f"--inventory={plan_file(tmp_path)}",
        "-o",
        "timeout=1",
        "-k",
        "test_last",
        str(pytester.path),
        PHASE_DIRS[0],  # the phase dir loads the plugins; -k leaves it out
    )
    assert "Timeout (>" not in done.stdout.str()
    done.assert_outcomes(passed=2)
