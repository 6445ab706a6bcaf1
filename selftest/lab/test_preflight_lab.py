"""The real preflight against the real lab: green when healthy, and each fault injected for
real turns exactly the tests that should see it red, naming the right node.

Host-level faults run `-m "preflight and not image"` (seconds); the faults the planned
image must see (its flags, its rendezvous) run the in-image tests too."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from selftest.suite import ROOT, SuiteRun, run_suite

# the first test may wait for the engine to be built (cold: ~6 min): past the 600 s backstop
pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]

MODEL_FILE = "SmolLM2-135M-Instruct/model.safetensors"
IMAGE = "infergate-lab/vllm-cpu:0.32.0"
# how the plan reaches a lab node, as the remedies spell it (Node.ssh_argv)
LAB_SSH = (
    "ssh -p 22 -i /var/lib/infergate-lab/ssh/id_ed25519 "
    "-o UserKnownHostsFile=/var/lib/infergate-lab/ssh/known_hosts"
)
NODES = ("node1", "node2")
PER_NODE = (
    "test_host.py::test_ssh_reachable_facts_gathered",
    "test_host.py::test_node_tools_present",
    "test_host.py::test_docker_engine_answers",
    "test_fabric.py::test_fabric_interface_up_with_planned_address",
    "test_fabric.py::test_fabric_peers_answer_ping",
    "test_memory.py::test_memory_available_for_plan",
    "test_containers.py::test_no_foreign_containers",
    "test_model.py::test_model_files_present",
    "test_engine.py::test_engine_env_names_exist_on_node",
    "test_disk.py::test_disk_room_for_image_model_and_caches",
    "test_offline.py::test_tokenizer_is_a_local_path",
    "test_kv_budget.py::test_context_length_fits_kv_cache",
    "test_ports.py::test_engine_ports_outside_ephemeral_range",
    "test_fabric_health.py::test_kernel_log_clean_since_boot",
)
IN_IMAGE_PER_NODE = (
    "test_in_image.py::test_model_architecture_supported_by_image",
    "test_in_image.py::test_engine_flags_accepted_by_image",
    "test_in_image.py::test_no_stray_nccl_conf_in_image",
    "test_known_bad.py::test_image_versions_not_known_bad",
    "test_launch_container.py::test_chat_template_renders_in_image",
    "test_launch_container.py::test_launch_container_open_files",
    "test_launch_container.py::test_launch_container_caches_writable",
    "test_in_image.py::test_probe_container_runs",
)
MTU = "test_fabric.py::test_fabric_mtu_equal_on_every_node"
DIST_INIT = "test_fabric.py::test_dist_init_port_reachable_from_every_node"
BALANCE = "test_memory.py::test_memory_balanced_across_nodes"
IMAGE_ID = "test_image.py::test_image_same_id_on_every_node"
MODEL_SAME = "test_model.py::test_model_same_files_and_sizes_on_every_node"
MODEL_CONTENT = "test_model.py::test_model_content_identical_on_every_node"
PINNED = "test_engine.py::test_engine_env_pins_the_fabric"
PORTS = "test_ports.py::test_engine_ports_free_on_every_node"
AFTER = "test_ports.py::test_ports_after_rendezvous_reachable_between_nodes"
SHARED_CACHES = "test_disk.py::test_compile_caches_not_shared_between_nodes"
HUB_OFFLINE = "test_offline.py::test_hub_offline_mode_where_the_hub_is_unreachable"
RAILS = "test_fabric_health.py::test_fabric_rails_carry_planned_bandwidth"
CLUSTER = (MTU, DIST_INIT, BALANCE, IMAGE_ID, MODEL_SAME, MODEL_CONTENT, PINNED, PORTS, AFTER)
CLUSTER += (SHARED_CACHES, HUB_OFFLINE, RAILS)
RENDEZVOUS = "test_in_image.py::test_rendezvous_all_reduce_across_nodes"
COLLECTIVE = "test_in_image.py::test_collective_sum_correct"
PARITY = "test_parity.py::test_stack_identical_on_every_node"
HOST_ONLY = ("-m", "preflight and not image")


def on(test: str, *nodes: str) -> set[str]:
    return {f"{test}[{n}]" for n in nodes}


def ran(run: SuiteRun) -> set[str]:
    return {t for t, o in run.outcomes.items() if o.status != "skipped"}


def host_level(pytester, *args: str) -> SuiteRun:
    return run_suite(pytester, *HOST_ONLY, *args)


def with_plan(tmp_path: Path, change) -> Path:
    """A copy of the lab plan with one change: a wrong plan is a fault too."""
    plan = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    change(plan)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


# --- healthy ------------------------------------------------------------------------------


def test_healthy_lab_all_green_with_the_image(healthy_preflight):
    run = healthy_preflight
    every = {f"{t}[{n}]" for t in PER_NODE + IN_IMAGE_PER_NODE for n in NODES}
    assert ran(run) == every | set(CLUSTER) | {RENDEZVOUS, COLLECTIVE, PARITY}, run.output
    assert run.red() == set(), run.output
    assert "infergate: per-node summary" in run.output


def test_healthy_lab_host_level_green_under_xdist(engine_lab, pytester):
    run = host_level(pytester, "-n", "2")
    assert ran(run) == {f"{t}[{n}]" for t in PER_NODE for n in NODES} | set(CLUSTER), run.output
    assert run.red() == set(), run.output


# --- host-level faults --------------------------------------------------------------------


# under xdist, one worker reads each fact of every node and the others load it (facts.py): the
# same tests red, with the same messages
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_link_down_names_the_node(engine_lab, pytester, workers):
    engine_lab.apply_fault("link-down", "node2")
    run = host_level(pytester, *workers)
    interface = "test_fabric.py::test_fabric_interface_up_with_planned_address"
    peers = "test_fabric.py::test_fabric_peers_answer_ping"
    cut = on(interface, "node2") | on(peers, *NODES) | {DIST_INIT, AFTER, RAILS}
    assert run.red() == cut, run.output
    text = run.message(f"{interface}[node2]")
    assert "node2 (10.251.0.12)" in text
    assert "fab0 is DOWN" in text
    assert "ip link set fab0 up" in text
    assert "node2 (10.252.0.12) answered 0 of 2 pings" in run.message(f"{peers}[node1]")
    rails = run.message(RAILS)  # both rails touch node2, and only node2 is to blame
    assert "node2 (10.251.0.12)" in rails
    assert "node1 (10.251.0.11)" not in rails


def test_mtu_mismatch_names_the_node(engine_lab, pytester):
    engine_lab.apply_fault("mtu", "node2", "1400")
    run = host_level(pytester)
    assert run.red() == {MTU}, run.output
    assert "node2 (10.251.0.12)" in run.message(MTU)
    assert "found MTU 1400; planned MTU 1500" in run.message(MTU)
    assert "node1" not in run.message(MTU)


def test_memory_held_names_the_node(engine_lab, pytester):
    engine_lab.apply_fault("hold-memory", "node1", "4")
    run = host_level(pytester)
    test = "test_memory.py::test_memory_available_for_plan[node1]"
    assert run.red() == {test, BALANCE}, run.output
    assert "bounded by cgroup /infergate-lab/node1" in run.message(test)
    assert "planned at least 3.1 GiB" in run.message(test)
    assert "node1 (10.251.0.11)" in run.message(BALANCE)
    assert "node2 (" not in run.message(BALANCE)


def one_root(run: SuiteRun, root: str, node: str, said: str, fix: str) -> set[str]:
    """ROOT, the check of a root, alone red, once; what it stops skipped naming it (their
    ids returned); no error; the verdict names the cause and its fix."""
    assert run.red() == {root}, run.output
    assert not [t for t, o in run.outcomes.items() if o.status == "error"], run.output
    stopped = {t for t, o in run.outcomes.items() if "not checked:" in o.message}
    for test in stopped:
        assert run.outcomes[test].status == "skipped", test
        assert f"not checked: {node}" in run.message(test), test
        assert f"({root.partition('::')[2]})" in run.message(test), test
    verdict = run.output.partition("infergate: verdict")[2]
    assert "NOT READY: 1 root cause(s), 0 other failure(s)" in verdict, run.output
    assert said in verdict, verdict
    assert f"fix: {fix}" in verdict, verdict
    return stopped


def test_sshd_stopped_is_one_failure_and_its_checks_skip(engine_lab, pytester):
    engine_lab.apply_fault("sshd-stop", "node2")
    run = host_level(pytester)
    root = "test_host.py::test_ssh_reachable_facts_gathered[node2]"
    stopped = one_root(
        run,
        root,
        "node2 (10.251.0.12)",
        "IG-SSH-UNREACHABLE unreachable over SSH",
        "start sshd on the node",
    )
    assert {f"{t}[node2]" for t in PER_NODE} - {root} <= stopped, run.output
    # the cluster checks judge node1; those that need both nodes skip naming node2
    assert {DIST_INIT, AFTER, RAILS, MODEL_CONTENT} <= stopped, run.output
    assert {MTU, BALANCE, IMAGE_ID, MODEL_SAME, PORTS} <= ran(run) - stopped, run.output
    assert run.outcomes[root].seconds < 10, run.outcomes[root].seconds


def test_docker_stopped_is_one_failure_and_its_checks_skip(engine_lab, pytester):
    engine_lab.apply_fault("docker-stop", "node2")
    run = host_level(pytester)
    root = "test_host.py::test_docker_engine_answers[node2]"
    stopped = one_root(
        run,
        root,
        "node2 (10.251.0.12)",
        "IG-DOCKER-DOWN docker CLI 28",
        "start the engine: `sudo systemctl start docker`",
    )
    assert "test_containers.py::test_no_foreign_containers[node2]" in stopped, run.output
    assert IMAGE_ID in ran(run), run.output  # judged on node1


def test_a_tool_missing_on_one_node_is_one_failure_naming_its_package(engine_lab, pytester):
    engine_lab.apply_fault("tool-missing", "node2", "ss")
    run = host_level(pytester)
    root = "test_host.py::test_node_tools_present[node2]"
    said = "IG-NODE-TOOLS-MISSING no `ss` (iproute2 / iproute) on the PATH"
    stopped = one_root(run, root, "node2 (10.251.0.12)", said, "apt-get install -y iproute2 ")
    # ss reads the ports in use: the free-ports check judges node1 alone; the dials between
    # the nodes, which sample free ports on both, skip
    assert stopped == {AFTER}, run.output
    assert PORTS in ran(run), run.output


def test_image_missing_is_one_failure_with_the_copy_command(engine_lab, pytester):
    engine_lab.apply_fault("image-missing", "node2", IMAGE)
    run = run_suite(pytester, "-m", "preflight")
    save, load = f"'docker save {IMAGE}'", "'docker load'"
    copy = f"{LAB_SSH} root@10.251.0.11 {save} | {LAB_SSH} root@10.251.0.12 {load}"
    stopped = one_root(run, IMAGE_ID, "node2 (10.251.0.12)", "IG-IMAGE-MISSING", copy)
    assert f"found image {IMAGE} missing" in run.message(IMAGE_ID)
    probe = "test_in_image.py::test_probe_container_runs[node2]"
    assert {probe, RENDEZVOUS, PARITY} | on(IN_IMAGE_PER_NODE[0], "node2") <= stopped
    assert on(IN_IMAGE_PER_NODE[0], "node1") <= ran(run), run.output


def test_foreign_container_is_named_with_its_memory(engine_lab, pytester):
    engine_lab.apply_fault("foreign-container", "node2", "1")
    run = host_level(pytester)
    test = "test_containers.py::test_no_foreign_containers[node2]"
    assert run.red() == {test, BALANCE}, run.output
    assert "container leftover-embeddings (image iglab/busybox" in run.message(test)
    assert "holding 1.0 GiB" in run.message(test)
    assert "node2 (10.251.0.12)" in run.message(BALANCE)


def test_taken_api_port_on_the_head_is_named(engine_lab, pytester):
    engine_lab.apply_fault("port-taken", "node1", "8000")
    run = host_level(pytester)
    assert run.red() == {PORTS}, run.output
    assert "node1 (10.251.0.11)" in run.message(PORTS)
    assert "TCP 8000 (API server) already taken" in run.message(PORTS)


def test_dropped_dist_init_port_is_named(engine_lab, pytester):
    engine_lab.apply_fault("drop-port", "node1", "29501")
    run = host_level(pytester)
    assert run.red() == {DIST_INIT}, run.output
    assert "node2 (10.251.0.12)" in run.message(DIST_INIT)
    assert "TCP to 10.252.0.11:29501 failed: error TimeoutError" in run.message(DIST_INIT)


def test_missing_shard_is_named(engine_lab, pytester):
    engine_lab.apply_fault("shard-missing", "node2", MODEL_FILE)
    run = host_level(pytester)
    files = "test_model.py::test_model_files_present[node2]"
    assert run.red() == {files, MODEL_SAME}, run.output
    assert "weight file(s) missing" in run.message(files)
    assert "node2 (10.251.0.12)" in run.message(MODEL_SAME)


@pytest.mark.parametrize("tier", ["cached", "full"])
def test_flipped_byte_with_size_and_mtime_kept_is_caught(engine_lab, pytester, tier):
    host_level(pytester)  # fills the nodes' hash caches with the good content
    engine_lab.apply_fault("shard-corrupt", "node2", MODEL_FILE)
    run = host_level(pytester, f"--model-hash={tier}")
    assert run.red() == {MODEL_CONTENT}, run.output
    text = run.message(MODEL_CONTENT)
    assert "node2 (10.251.0.12)" in text
    assert "model.safetensors sha256" in text
    assert "node1 (" not in text  # the plan's manifest says which node is right


def test_image_different_on_one_node_is_named(engine_lab, pytester):
    engine_lab.apply_fault("image-different", "node2", IMAGE)
    run = host_level(pytester)
    assert run.red() == {IMAGE_ID}, run.output
    assert "node2 (10.251.0.12)" in run.message(IMAGE_ID)
    assert "node1 (" not in run.message(IMAGE_ID)


# --- what the image itself must see -------------------------------------------------------


def test_flag_of_the_other_engine_is_named(engine_lab, pytester, tmp_path):
    plan = with_plan(
        tmp_path, lambda p: p["engine"]["flags"].extend(["--mem-fraction-static", "0.8"])
    )
    run = run_suite(pytester, "-m", "preflight and image", inventory=plan)
    flags = on("test_in_image.py::test_engine_flags_accepted_by_image", *NODES)
    assert run.red() == flags, run.output
    assert "vllm in the image rejects --mem-fraction-static: it is a SGLang flag" in run.message(
        "test_in_image.py::test_engine_flags_accepted_by_image[node1]"
    )


def test_engine_facts_are_reused_only_for_the_same_image_config_and_plan(
    healthy_preflight, engine_lab, pytester, tmp_path
):
    # cached on each node by the session's healthy preflight, under a key of this image,
    # config and plan (their content: other plans and faults get keys of their own)
    again = run_suite(pytester, "-m", "preflight and image")
    assert again.red() == set(), again.output
    said = "facts (versions, registry, model config, flags, chat template): node1 cached, "
    assert said + "node2 cached" in again.output
    # a flag value no earlier run planned: a new key, so the image reads it again
    seqs = str(100 + time.time_ns() % 100_000)
    plan = with_plan(tmp_path, lambda p: p["engine"]["flags"].extend(["--max-num-seqs", seqs]))
    changed = run_suite(pytester, "-m", "preflight and image", inventory=plan)
    assert changed.red() == set(), changed.output
    assert "node1 fresh, node2 fresh" in changed.output
    forced = run_suite(pytester, "-m", "preflight and image", "--in-image", "fresh")
    assert forced.red() == set(), forced.output
    assert "node1 fresh, node2 fresh" in forced.output


def test_wrong_gloo_interface_fails_on_the_node_and_in_the_rendezvous(
    engine_lab, pytester, tmp_path
):
    plan = with_plan(tmp_path, lambda p: p["engine"]["env"].update(GLOO_SOCKET_IFNAME="fab1"))
    run = run_suite(pytester, "-m", "preflight", inventory=plan)
    names = on("test_engine.py::test_engine_env_names_exist_on_node", *NODES)
    assert run.red() == names | {RENDEZVOUS}, run.output
    assert "GLOO_SOCKET_IFNAME=fab1: no interface fab1" in run.message(f"{sorted(names)[0]}")
    assert "Unable to find address for: fab1" in run.message(RENDEZVOUS)


@pytest.mark.parametrize(
    ("fault", "args"), [("drop-port", ("node1", "29501")), ("link-down", ("node2",))]
)
def test_rendezvous_turns_red_within_its_deadline(engine_lab, pytester, fault, args):
    engine_lab.apply_fault(fault, *args)
    start = time.monotonic()
    run = run_suite(pytester, "-m", "preflight and image")
    assert RENDEZVOUS in run.red(), run.output
    assert "node2 (10.251.0.12)" in run.message(RENDEZVOUS)
    assert time.monotonic() - start < 30 + 180  # the lab's deadline + the import allowance


def test_a_run_stopped_early_removes_its_probe_containers_before_their_deadline(
    engine_lab, pytester
):
    # node2 cut off: its rendezvous would wait out the 30 s deadline; -x ends the run at the
    # first failure, while the probes started with the first test still run
    engine_lab.apply_fault("link-down", "node2")
    start = time.monotonic()
    run = run_suite(pytester, "-m", "preflight", "-x")
    elapsed = time.monotonic() - start
    assert len(run.red()) == 1, run.output
    assert RENDEZVOUS not in run.outcomes, run.output
    label = "label=infergate.preflight"
    listed = f"docker ps -a --format {{{{.Names}}}} --filter {label}"
    left = {n: engine_lab.ssh(n, [listed]).stdout.split() for n in NODES}
    assert left == {"node1": [], "node2": []}, run.output
    assert elapsed < 30, f"{elapsed:.1f} s: the probes were left to their deadline\n{run.output}"
