"""The real launch in the lab: a two-node vLLM (tensor parallel 2 over the fabric) comes up,
serves, and leaves nothing, under a pytest-timeout backstop far below the launch (the
healthy launch is test_secrets_lab's, with the plan's secrets); each way
the two-Spark report's launch failed, reproduced for real, is caught with the node named, by
the engine's own words where it says why, and always within the plan's deadline + 5 s (the
deadlines hold on a CPU 4x slower than the AVX-512 one this was first measured on, so no
assertion here depends on this machine's speed). Ctrl-C mid-launch is test_signals_lab's,
beside the other signals.

The failures run the lab's TP 2 plan (inventories/lab-moe-tp2.yaml: ready in ~45 s with
AVX-512 kernels)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from docker import DockerClient

from infergate.deploy.api import http_get
from infergate.deploy.executor import Deployment
from infergate.deploy.failure import LaunchFailed
from infergate.deploy.state import DeployOptions
from infergate.engines.labels import RUN_LABEL
from infergate.engines.launch import Start
from infergate.engines.registry import plan_launch
from infergate.plan.model import Inventory, parse_inventory
from infergate.remote.docker_api import local_engine
from infergate.reports.inference_json import read_results
from infergate_lab import Lab
from infergate_lab.engine import node_io
from selftest.suite import ROOT, SuiteProcess, SuiteRun, read_junit, run_folder_in, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

TP2 = ROOT / "inventories" / "lab-moe-tp2.yaml"
DEADLINE = yaml.safe_load(TP2.read_text())["thresholds"]  # the launch's deadlines, in s
NODES = ("node1", "node2")
FOREIGN = "leftover-embeddings"  # the lab's foreign-container fault
IMAGE = "infergate-lab/vllm-cpu:0.32.0"
JOINED = "test_deploy.py::test_every_planned_node_joined"
# 5 s: the TP 2 launch was ready after 22 s here with its compile cache warm; 20 s (the
# issue's figure) would leave a faster machine's launch proving nothing
BACKSTOP = ("-o", "timeout=5")
PYTEST_TIMEOUT = "Timeout (>"  # how pytest-timeout's failure begins


def plan_file(tmp_path: Path, change=None, base: Path = TP2) -> Path:
    plan = yaml.safe_load(base.read_text())
    if change:
        change(plan)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


SHORT = 4  # requests a level of a short sweep


def short_sweep(plan: dict, concurrency: Sequence[int] = (1, SHORT)) -> None:
    """SHORT requests of 16 tokens a level: every output and picture of the report in CI's
    time; where a defect shows in any level, a longer sweep only costs time."""
    sweep = {"concurrency": list(concurrency), "requests_per_level": SHORT, "output_tokens": 16}
    # the context ladder is climbed in one run alone (test_inference_lab.py): CI's time
    plan["inference"].update(sweep, ladder={"enabled": False})


def suite_args(pytester: pytest.Pytester, *args: str) -> list[str]:
    return ["--report-dir", str(pytester.path / "report"), *args]


def deploy(pytester: pytest.Pytester, plan: Path, *args: str) -> SuiteRun:
    return run_suite(pytester, *suite_args(pytester, "-m", "deploy", *args), inventory=plan)


def run_containers(lab: Lab) -> dict[str, list[str]]:
    """Containers of any infergate run, per node: a run must leave none."""
    found = {
        n: lab.ssh(n, [f"docker ps -aq --filter label={RUN_LABEL}"]).stdout.split() for n in NODES
    }
    return {n: ids for n, ids in found.items() if ids}


def foreign_running(lab: Lab, node: str = "node1") -> bool:
    done = lab.ssh(node, ["docker", "inspect", "-f", "{{.State.Running}}", FOREIGN])
    return done.stdout.strip() == "true"


def ready_after(pytester: pytest.Pytester) -> float:
    """The launch's own clock when the API answered: `[  45.3 s] ready: http://...`."""
    log = (run_folder_in(pytester.path / "report") / "deploy.log").read_text()
    found = re.search(r"\[\s*([\d.]+) s\] ready: ", log)
    assert found, log
    return float(found.group(1))


def detected_after(message: str) -> float:
    """The launch's own clock at the failure: `... failed ... after 12.3 s:`."""
    found = re.search(r"failed.*? after ([\d.]+) s:", message)
    assert found, message
    return float(found.group(1))


def launch_failure(run: SuiteRun) -> str:
    assert JOINED in run.red(), run.output
    return run.message(JOINED)


# --- healthy ------------------------------------------------------------------------------


def served_and_left_only_what_it_found(run: SuiteRun, pytester: pytest.Pytester, lab: Lab):
    """The healthy launch's facts (test_secrets_lab's, with the foreign-container fault on
    node1): it outlasted the 5 s backstop, served, reported, and left only the foreign one."""
    assert PYTEST_TIMEOUT not in run.output
    assert ready_after(pytester) > 5 * 2, "the launch hardly outlasted the backstop"
    assert "test_performance.py::test_throughput_meets_the_plan" in run.outcomes
    assert not [t for t in run.outcomes if "test_chaos.py" in t], "the default run ran chaos"
    passed = {t for t, o in run.outcomes.items() if o.status == "passed"}
    assert {f"test_deploy.py::test_rank_is_alive[{n}]" for n in NODES} <= passed
    assert "test_conformance.py::test_openai_client_works_end_to_end" in passed
    log = (run_folder_in(pytester.path / "report") / "deploy.log").read_text()
    for milestone in ("distributed init", "weights loaded", "server ready", "API ready"):
        assert milestone in log, log
    assert run_containers(lab) == {}
    assert foreign_running(lab), "the run stopped a container it did not start"
    report = run_folder_in(pytester.path / "report")
    # tok/s and TTFT against concurrency, latency-throughput, the TTFT and ITL distributions,
    # tok/s over time, the engine's /metrics, the memory guard's curve of each node: a missing
    # one says its data was not there
    page = (report / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 7 + 2
    assert (report / "evidence" / "node2" / "container.log").stat().st_size > 0
    # the tiny MoE's decode roofline at TP 2 (test_roofline_lab gates SmolLM2's at PP 2)
    found = read_results(report / "results.json").roofline
    assert found is not None, page
    assert found.roofline is not None, found.unknown
    assert found.fraction is not None, found
    assert found.roofline.bandwidth_source.endswith("a 1-thread copy measured"), found
    assert "Decode roofline" in page


# --- failures of the two-Spark report, for real --------------------------------------------


def test_rejected_flag_fails_at_once_naming_the_flag(engine_lab, pytester, tmp_path):
    plan = plan_file(tmp_path, lambda p: p["engine"]["flags"].append("--no-such-flag"))
    message = launch_failure(deploy(pytester, plan))
    assert "the engine rejected a flag" in message
    assert "--no-such-flag" in message
    assert detected_after(message) < 60
    assert run_containers(engine_lab) == {}


def test_image_missing_on_the_worker_names_it_with_the_load_command(engine_lab, pytester):
    engine_lab.apply_fault("image-missing", "node2", IMAGE)
    message = launch_failure(deploy(pytester, TP2))
    assert "node2 (10.251.0.12)" in message
    assert "docker save IMAGE | ssh -p 22 -i /var/lib/infergate-lab/ssh/id_ed25519 " in message
    assert "root@10.251.0.12 'docker load'" in message
    assert detected_after(message) < 10
    assert run_containers(engine_lab) == {}


def test_api_port_taken_on_the_head_is_named(engine_lab, pytester):
    engine_lab.apply_fault("port-taken", "node1", "8000")
    message = launch_failure(deploy(pytester, TP2))
    assert "node1 (10.251.0.11)" in message
    assert "a port the engine binds is taken" in message
    assert detected_after(message) < DEADLINE["ready_timeout_s"] + 5
    assert run_containers(engine_lab) == {}


def test_wrong_gloo_interface_fails_within_the_init_deadline(engine_lab, pytester, tmp_path):
    plan = plan_file(tmp_path, lambda p: p["engine"]["env"].update(GLOO_SOCKET_IFNAME="fab9"))
    message = launch_failure(deploy(pytester, plan))
    assert "a socket interface or address the plan pins is not on the node" in message
    assert "Unable to find address for: fab9" in message
    assert detected_after(message) < DEADLINE["dist_init_timeout_s"] + 5
    assert run_containers(engine_lab) == {}


def test_memory_held_on_one_node_is_named(engine_lab, pytester, tmp_path):
    # A 3 GiB KV cache (touched at start-up) beside 2.5 GiB held in the node's 6 GiB: the
    # worker cannot fit and the kernel kills it (the biggest process then), as on the two-Spark
    # report's worker node (docs/notes.md#two-spark-report). Without the hog the same plan comes
    # up (see the healthy test's budget).
    engine_lab.apply_fault("hold-memory", "node2", "2.5")
    plan = plan_file(tmp_path, lambda p: p["engine"]["env"].update(VLLM_CPU_KVCACHE_SPACE="3"))
    message = launch_failure(deploy(pytester, plan))
    assert "node2 (10.251.0.12)" in message
    assert "the kernel OOM-killed VLLM::Worker" in message
    assert detected_after(message) < DEADLINE["weights_timeout_s"] + 5
    assert run_containers(engine_lab) == {}


def test_link_down_during_init_fails_within_the_init_deadline(engine_lab, pytester):
    """Under the backstop too: the red is infergate's own, a minute after pytest-timeout's 5 s."""
    suite = SuiteProcess(pytester, "run", TP2, "-m", "deploy", *BACKSTOP)
    suite.wait_for(re.escape("node2 (10.251.0.12): started"))
    engine_lab.apply_fault("link-down", "node2")
    suite.proc.wait(timeout=DEADLINE["dist_init_timeout_s"] + 120)
    assert PYTEST_TIMEOUT not in suite.output()
    message = read_junit(suite.junit)[JOINED].message
    # whichever gives up first after 60 s (the head waiting for "clients", by the plan's
    # --distributed-timeout-seconds, or node2's store client, by its retries' random backoff),
    # node2 is named with its own cause, its retry lines' or its fatal line's, and the other
    # node beside it as short of init
    assert "node1 (10.251.0.11)" in message
    node2 = node_section(message, "node2 (10.251.0.12)")
    assert node2.startswith("node2 (10.251.0.12): 1 problem(s)")
    assert "this rank has no route to the dist-init store" in node2
    assert "(errno: 101 - Network is unreachable)" in node2
    assert "fix: bring the node's fabric link up" in node2
    assert "not past `distributed init`" in message
    assert detected_after(message) < DEADLINE["dist_init_timeout_s"]
    assert run_containers(engine_lab) == {}


def test_worker_never_started_leaves_the_head_silent_until_the_deadline(engine_lab):
    plan = load(TP2, dist_init_timeout_s=30)
    launch = plan_launch(plan, "selftest-lone-head")
    steps = tuple(s for s in launch.steps if not (isinstance(s, Start) and s.node == "node2"))
    said: list[str] = []
    options = DeployOptions(engines=lab_engines(engine_lab))
    nodes = {n.name: n for n in plan.nodes}
    with Deployment(launch, nodes, node_io(engine_lab), said.append, options) as d:
        with pytest.raises(LaunchFailed) as failed:
            d.perform(steps)
        silent = http_get(f"{launch.endpoint}/health", 3)
    message = str(failed.value)
    assert "node2 (10.251.0.12)" in message
    assert "its container was never started" in message
    assert 30 <= detected_after(message) < 30 + 5
    assert silent.status == 0, "the lone head was expected to have no HTTP listener"
    assert run_containers(engine_lab) == {}


KILLER = """
import json, pathlib, shlex, time, urllib.request
from infergate_lab import Lab

def pytest_runtest_call(item):
    if item.name != "test_rank_is_alive[node2]":
        return
    lab = Lab()
    top = "docker top $(docker ps -q --filter label=infergate.run) -o pid,args"
    pids = [ln.split()[0] for ln in lab.ssh("node2", [top]).stdout.splitlines()
            if "VLLM::Worker" in ln]
    lab.ssh("node2", ["kill", "-9", *pids])
    time.sleep(2)
    with urllib.request.urlopen("http://10.251.0.11:8000/health", timeout=5) as r:
        pathlib.Path("health-after-kill.txt").write_text(str(r.status))
"""


def test_worker_killed_after_ready_is_a_dead_rank_though_health_says_200(engine_lab, pytester):
    pytester.makepyfile(killer=KILLER)
    run = deploy(pytester, TP2, "-p", "killer")
    assert (pytester.path / "health-after-kill.txt").read_text() == "200"
    alive = "test_deploy.py::test_rank_is_alive[node2]"
    assert alive in run.red(), run.output
    assert "node2 (10.251.0.12)" in run.message(alive)
    assert "VLLM::Worker" in run.message(alive) or "exited" in run.message(alive)
    assert run_containers(engine_lab) == {}


def test_ray_cluster_forms_and_is_gated_but_vllm_cpu_refuses_ray(engine_lab, pytester, tmp_path):
    def to_ray(p):
        p["engine"].update(kind="vllm-ray", dist_init_port=6379)

    message = launch_failure(deploy(pytester, plan_file(tmp_path, to_ray)))
    log = (run_folder_in(pytester.path / "report") / "deploy.log").read_text()
    assert "every node in ray status: 2 node(s) alive" in log, log
    assert "current platform cpu does not support ray" in message
    assert run_containers(engine_lab) == {}


# --- helpers ------------------------------------------------------------------------------


def lab_engines(lab: Lab) -> dict[str, DockerClient]:
    """Each lab node's Docker Engine API, on the node's own socket on this machine."""
    return {n: local_engine(lab.spec(n).docker_host) for n in NODES}


def load(path: Path, **thresholds: float) -> Inventory:
    data = yaml.safe_load(path.read_text())
    data["thresholds"].update(thresholds)
    return parse_inventory(data)


def node_section(message: str, where: str) -> str:
    """WHERE's problems in a launch failure: its heading and the indented lines under it."""
    lines = message.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{where}: "))
    end = next(
        (i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines)
    )
    return "\n".join(lines[start:end])
