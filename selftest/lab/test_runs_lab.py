"""A launch whose run id is already on a node is refused before it starts anything, and its
teardown then removes nothing: the containers that carried the id were not its own."""

from __future__ import annotations

import pytest

from infergate.deploy.executor import Deployment
from infergate.deploy.failure import LaunchFailed
from infergate.deploy.state import DeployOptions
from infergate.engines.registry import plan_launch
from infergate_lab.docker import LAB_IMAGE
from infergate_lab.engine import node_io
from selftest.lab.test_deploy_lab import TP2, lab_engines, load

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]

RUN = "20261201-031700-0123456789abcdef"


def test_launch_refused_when_its_label_or_name_is_taken_and_removes_nothing(engine_lab):
    engine_lab.make_image("node2")
    taken = {  # one by label (another launch's, same id), one by this launch's own name
        "node2": ["--label", f"infergate.run={RUN}", "--name", "someone-elses"],
        "node1": ["--name", f"infergate-node1-{RUN}"],
    }
    engine_lab.make_image("node1")
    for node, options in taken.items():
        started = engine_lab.ssh(node, ["docker", "run", "-d", *options, LAB_IMAGE, "sleep", "300"])
        assert started.returncode == 0, started.stderr
    plan = load(TP2)
    said: list[str] = []
    try:
        launch, nodes = plan_launch(plan, RUN), {n.name: n for n in plan.nodes}
        options = DeployOptions(engines=lab_engines(engine_lab))
        handle = Deployment(launch, nodes, node_io(engine_lab), said.append, options)
        with handle, pytest.raises(LaunchFailed) as refused:
            handle.perform()
        message = str(refused.value)
        assert f"launch of vllm (run {RUN}) refused, nothing started:" in message
        assert "node1 (10.251.0.11): 1 problem(s)" in message
        assert f"container(s) infergate-node1-{RUN} already there" in message
        assert "node2 (10.251.0.12): 1 problem(s)" in message
        assert "container(s) someone-elses already there" in message
        for node, name in (("node1", f"infergate-node1-{RUN}"), ("node2", "someone-elses")):
            running = engine_lab.ssh(node, ["docker", "inspect", "-f", "{{.State.Running}}", name])
            assert running.stdout.strip() == "true", f"the refused launch removed {name}"
        assert not [s for s in said if "started" in s or "stopped run" in s], said
    finally:
        for node, name in (("node1", f"infergate-node1-{RUN}"), ("node2", "someone-elses")):
            engine_lab.ssh(node, ["docker", "rm", "-f", name])
