"""The memory guard's breach reaches the running test for real: the sampling sessions run as
local shells (`connection: local` nodes) under a floor above any machine's memory, and the
test that is sleeping fails at once with the guard's words; the removal is the deploy
handle's, stood in for by a counter here (the lab's test removes real containers)."""

from __future__ import annotations

import pytest

CONFTEST = """
import pytest, yaml
from infergate.fixtures.memguard import MemoryWatch
from infergate.plan.model import parse_inventory
from infergate.remote.ssh import Remote

class Handle:
    stopped = 0
    def stop(self):
        Handle.stopped += 1

@pytest.fixture(scope="session")
def watch(pytestconfig, tmp_path_factory):
    data = yaml.safe_load(open(PLAN).read())
    for node in data["nodes"]:
        node["ssh"] = {"connection": "local"}
    data["guard"] = {"memory": "on", "memory_floor_gib": 60000, "memory_interval_s": 0.2}
    plan = parse_inventory(data)
    remotes = {n.name: Remote(n, None, 30) for n in plan.nodes}
    w = MemoryWatch(plan, remotes, "run-1", tmp_path_factory.mktemp("r") / "deploy.log")
    pytestconfig.pluginmanager.register(w, "guard-under-test")
    w.arm(Handle())
    yield w
    w.stop()
    assert Handle.stopped == 1
"""

TESTS = """
import time

def test_held(watch):
    watch.start()
    time.sleep(30)

def test_after(watch):
    assert watch.reported
    assert watch.ready.is_set()
"""


def test_a_breach_fails_the_running_test_at_once(pytester: pytest.Pytester) -> None:
    from selftest.suite import LAB_PLAN

    pytester.makeconftest(f"PLAN = {str(LAB_PLAN)!r}\n" + CONFTEST)
    pytester.makepyfile(test_held=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "--durations=2")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "the memory guard stopped run run-1 on node" in out
    assert "guard.memory_floor_gib" in out
    duration = [ln for ln in out.splitlines() if "call" in ln and "test_held" in ln]
    assert duration, out
    assert float(duration[0].split("s", 1)[0]) < 10, duration  # not the 30 s sleep
