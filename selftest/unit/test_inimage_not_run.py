"""Where the probe container cannot start, every in-image test says why, and only why.

The real suite runs against this machine as the lent 2xH200 host's plan describes it
(inventories/h200-device.yaml, testinfra's local backend): its planned image is not here,
and this machine has at most a docker CLI. No test may judge sections that were never
printed ("no CUDA init probe", "no `via` lines", a parse error)."""

from __future__ import annotations

import pytest

from infergate.checks.facts import docker_of, image_id_of
from infergate.checks.host import DockerEngine
from infergate.checks.image import check_image_parity
from infergate.checks.inimage_ran import check_probe_ran, image_to_run, probe_blockers
from infergate.checks.probe import Section, parse_sections
from infergate.fixtures.inventory import load_inventory
from selftest.suite import LOCKS_LOCALHOST, ROOT, run_suite

DEVICE_PLAN = ROOT / "inventories" / "h200-device.yaml"
LAB = ROOT / "selftest" / "data" / "lab"  # host probes recorded in the lab (data/README.md)
HEAD_ID = "sha256:" + "1f" * 32
ANSWERING = DockerEngine("28.2.2", "20.10.24", "")
PROBE = "test_in_image.py::test_probe_container_runs[h200]"
IN_IMAGE = {
    "test_in_image.py::test_model_architecture_supported_by_image[h200]",
    "test_in_image.py::test_engine_flags_accepted_by_image[h200]",
    "test_in_image.py::test_no_stray_nccl_conf_in_image[h200]",
    "test_in_image.py::test_rendezvous_all_reduce_across_nodes",
    "test_in_image.py::test_collective_sum_correct",
    "test_in_image.py::test_nccl_transport_and_bandwidth",
    "test_gpu.py::test_image_cuda_initialises_on_driver[h200]",
    "test_gpu.py::test_engine_free_memory_near_meminfo[h200]",
    "test_known_bad.py::test_image_versions_not_known_bad[h200]",
    "test_launch_container.py::test_chat_template_renders_in_image[h200]",
    "test_launch_container.py::test_launch_container_open_files[h200]",
    "test_launch_container.py::test_launch_container_locked_memory_unlimited[h200]",
    "test_launch_container.py::test_launch_container_caches_writable[h200]",
}
# the roots before the probe container, on a machine with no docker CLI, no engine, or no image
BEFORE_PROBE = (
    "(test_node_tools_present[h200])",
    "(test_docker_engine_answers[h200])",
    "(test_image_same_id_on_every_node)",
)


@LOCKS_LOCALHOST
def test_in_image_tests_name_the_missing_engine_or_image_instead_of_judging_nothing(
    pytester: pytest.Pytester,
) -> None:
    # test_parity reads host facts of its own (the image ID) and says so: not in question here
    run = run_suite(pytester, "-m", "image", "-k", "not parity", inventory=DEVICE_PLAN)
    assert set(run.outcomes) == IN_IMAGE | {PROBE}, run.output
    for test in IN_IMAGE | {PROBE}:
        outcome = run.outcomes[test]
        assert outcome.status == "skipped", (test, outcome.message)
        assert outcome.message.startswith("not checked: h200 (localhost) "), test
        assert any(root in outcome.message for root in BEFORE_PROBE), outcome.message


def lab_probe(case: str, node: str) -> dict[str, Section]:
    return parse_sections((LAB / f"{case}-{node}-probe.txt").read_text())


def test_a_node_without_the_image_gets_the_image_checks_words_and_copy_command():
    inventory = load_inventory(ROOT / "inventories" / "lab.yaml")  # no image.id in the plan
    ids = {"node1": HEAD_ID, "node2": image_id_of(lab_probe("healthy", "node2"))}
    assert ids["node2"] is None  # recorded before the lab's image was built there
    assert image_to_run(inventory, ids) == HEAD_ID  # the head's, as its host probe read it
    blocked = probe_blockers(inventory, {"node1": ANSWERING, "node2": ANSWERING}, ids)
    assert blocked["node1"] == []
    parity = check_image_parity(inventory.image.ref, ids, inventory.nodes, HEAD_ID)
    assert blocked["node2"] == parity["node2"]
    (problem,) = blocked["node2"]
    assert problem.found == "image infergate-lab/vllm-cpu:0.32.0 missing"
    assert problem.remedy.endswith("root@10.251.0.12 'docker load'")


def test_a_node_whose_engine_is_down_gets_the_docker_checks_words():
    inventory = load_inventory(ROOT / "inventories" / "lab.yaml")
    engines = {"node1": ANSWERING, "node2": docker_of(lab_probe("docker-stopped", "node2"))}
    blocked = probe_blockers(inventory, engines, {"node1": HEAD_ID, "node2": None})
    (problem,) = blocked["node2"]
    assert problem.found.startswith("docker CLI 28.2.2 but no engine answered: Cannot connect")
    assert "systemctl start docker" in problem.remedy


def test_a_probe_container_that_died_says_its_exit_code_and_stderr():
    said = 'docker: Error response from daemon: invalid mount config for type "bind"'
    cache = {"facts-cache": Section(0, '{"key": "ab", "hit": false}')}
    (problem,) = check_probe_ran(cache, 125, said, "img:1")
    assert problem.found.startswith("the probe container exited 125 before the probe printed")
    assert said in problem.found
    assert check_probe_ran({**cache, "cuda": Section(0, "{}")}, 0, "", "img:1") == []


@LOCKS_LOCALHOST
def test_a_one_node_plan_skips_the_dials_alone(pytester: pytest.Pytester) -> None:
    """The dials between nodes skip on a one-node plan; that skip is theirs, not the in-image
    tests' (which once all read "the plan has one node")."""
    run = run_suite(
        pytester, "-m", "preflight", "-k", "after_rendezvous or open_files", inventory=DEVICE_PLAN
    )
    dials = run.outcomes["test_ports.py::test_ports_after_rendezvous_reachable_between_nodes"]
    in_image = run.outcomes["test_launch_container.py::test_launch_container_open_files[h200]"]
    assert dials.status == in_image.status == "skipped", run.output
    assert "the plan has one node" in dials.message
    assert in_image.message.startswith("not checked: h200 (localhost) ")
