"""The preflight sharded over two remote xdist workers (`--tx ssh=...`, one on each lab
node, each the controller of its own shard) gives every check the verdict and the message one
process gives, with a fault in each shard and one across them, and the same preflight.json."""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from selftest.lab.test_preflight_lab import MODEL_FILE
from selftest.suite import LAB_PLAN, SuiteRun, read_junit, run_folder_in

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]

LAB_SSH = Path("/var/lib/infergate-lab/ssh")
RENDERED = Path("/var/lib/infergate-lab/inventory.yaml")  # the plan of the lab as it is now
HOST_ONLY = "preflight and not image"
PORTS = "test_ports.py::test_engine_ports_free_on_every_node"
DIST_INIT = "test_fabric.py::test_dist_init_port_reachable_from_every_node"


def worker_python(folder: Path) -> str:
    """A command that starts this interpreter's environment inside a lab node. A node has
    its own /root: an interpreter under it is reached through the system one of the same
    version, with this environment's packages added by a sitecustomize."""
    here = os.path.realpath(sys.executable)
    if not here.startswith("/root/"):
        return sys.executable
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not Path(system).exists():
        pytest.fail(f"{here} is under /root, which a lab node does not see, and {system} is absent")
    bridge = folder / "worker-site"
    bridge.mkdir()
    purelib = sysconfig.get_paths()["purelib"]
    (bridge / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({purelib!r})\n")
    return f"PYTHONPATH={bridge} {system}"


def remote_workers(folder: Path, *numbers: int) -> list[str]:
    """A --tx spec per lab node of NUMBERS: a worker there, over ssh with the lab's key."""
    config = folder / "workers.ssh"
    config.write_text(
        "".join(
            f"Host worker{k}\n  HostName 10.251.0.{10 + k}\n  User root\n"
            f"  IdentityFile {LAB_SSH / 'id_ed25519'}\n"
            f"  UserKnownHostsFile {LAB_SSH / 'known_hosts'}\n"
            for k in numbers
        )
    )
    python = worker_python(folder)
    return [f"--tx=ssh=-F {config} worker{k}//python={python}" for k in numbers]


def verdicts(run: SuiteRun) -> dict[str, tuple[str, str]]:
    """Each test's status, and its message where it is red."""
    return {
        test: (o.status, o.message if o.status in ("failed", "error") else "")
        for test, o in run.outcomes.items()
    }


def kept(folder: Path) -> dict[str, object]:
    """The run's preflight.json, less what differs between any two runs (time, run id, and
    live figures: memory, PSI, hash seconds)."""
    found = json.loads((run_folder_in(folder) / "preflight.json").read_text())
    nodes = [
        {k: v for k, v in n.items() if k in ("node", "address", "checks")} for n in found["nodes"]
    ]
    # the causes come in the order their reports reached the controller
    causes = sorted(json.dumps(c, sort_keys=True) for c in found["causes"])
    return {
        "nodes": nodes,
        "causes": causes,
        "parity": found["parity"],
        "not_run": found["not_run"],
    }


def preflight(
    pytester: pytest.Pytester,
    name: str,
    *args: str,
    plan: Path = LAB_PLAN,
    marks: str = "preflight",
) -> SuiteRun:
    """The installed preflight on PLAN (by module: xdist hands a remote worker no path
    outside its rsync roots), its reports in NAME."""
    junit = pytester.path / f"{name}.xml"
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--pyargs",
        "infergate.tests_preflight",
        "-m",
        marks,
        f"--plan={plan}",
        f"--junitxml={junit}",
        f"--report-dir={pytester.path / name}",
        *args,
    )
    return SuiteRun(read_junit(junit), result.stdout.str())


def both(
    pytester: pytest.Pytester, workers: tuple[int, ...] = (1, 2), **given: Any
) -> tuple[SuiteRun, SuiteRun]:
    """The preflight in one process, then sharded over remote workers on lab nodes WORKERS."""
    one = preflight(pytester, "one", **given)
    tx = remote_workers(pytester.path, *workers)
    return one, preflight(pytester, "sharded", "--dist=load", "--shard-by=plan", *tx, **given)


def test_sharded_workers_judge_as_one_process_with_faults_in_each_shard_and_across(
    engine_lab, pytester
):
    # node2's shard: a weight file gone; node1's: the API port taken; across them: node1
    # drops TCP to the dist-init port, which node2 (in the other shard) dials
    engine_lab.apply_fault("shard-missing", "node2", MODEL_FILE)
    engine_lab.apply_fault("port-taken", "node1", "8000")
    engine_lab.apply_fault("drop-port", "node1", "29501")
    one, sharded = both(pytester)
    assert "@shard-1" in sharded.output, sharded.output[-3000:]
    assert verdicts(sharded) == verdicts(one), sharded.output[-6000:]
    red = one.red()
    assert "test_model.py::test_model_files_present[node2]" in red, one.output[-4000:]
    assert {PORTS, DIST_INIT} <= red
    assert kept(pytester.path / "sharded") == kept(pytester.path / "one")


def test_sharded_workers_pass_a_healthy_lab_as_one_process(engine_lab, pytester):
    one, sharded = both(pytester)
    assert not one.red(), one.output[-4000:]
    assert verdicts(sharded) == verdicts(one), sharded.output[-6000:]
    assert kept(pytester.path / "sharded") == kept(pytester.path / "one")


def test_sharded_workers_judge_a_16_node_sshd_only_lab_as_one_process(lab, pytester):
    """Sixteen nodes, a worker on node1 (shard node1-node8) and on node16 (node9-node16):
    `ss` gone on node3 and on node12, and node1 (the head) dropping the dist-init port that
    every other node dials, across the shards; without dockerd every engine test is red too."""
    try:
        lab.up(16, docker=False)
        lab.apply_fault("tool-missing", "node3", "ss")
        lab.apply_fault("tool-missing", "node12", "ss")
        lab.apply_fault("drop-port", "node1", "29501")
        one, sharded = both(pytester, (1, 16), plan=RENDERED, marks=HOST_ONLY)
        assert "@shard-1" in sharded.output, sharded.output[-3000:]
        assert verdicts(sharded) == verdicts(one), sharded.output[-6000:]
        tools = "test_host.py::test_node_tools_present"
        assert {f"{tools}[node3]", f"{tools}[node12]", DIST_INIT} <= one.red(), one.output[-4000:]
        assert "node16 (10.251.0.26)" in one.message(DIST_INIT)  # dialled from the other shard
        assert kept(pytester.path / "sharded") == kept(pytester.path / "one")
    finally:
        lab.clear_faults()
        lab.up(2)
