"""The reader of `py-spy dump` and the judge of where a hung rank waits, on real dumps.

Sources (selftest/data/py-spy/, README rows): local-*.txt are the forensics' own dump script
(infergate.deploy.forensics.HOST) run on this project's machine: against a Python process
blocked in `socket.accept` and a `sleep`; against torch 2.13's `init_process_group` of rank 0
of 2 with no rank 1 (gloo, a TCP store on 127.0.0.1); against a pid that is gone
(RUST_BACKTRACE=1); and with no py-spy on the PATH. vllm-*.txt and sglang-*.txt are the
lab's, as its deploy wrote them (selftest/data/README.md).
"""

from __future__ import annotations

from pathlib import Path

from infergate.deploy.failure import failure_text
from infergate.deploy.forensics import INSIDE, INSTALL, ON_HOST, no_stacks
from infergate.deploy.stacks import (
    Frame,
    main_thread,
    parse_py_spy_dump,
    rank_lines,
    split_dumps,
    title,
    waiting_in,
)
from infergate.deploy.watch import NodeWatch
from infergate.engines.registry import plan_launch
from infergate.fixtures.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data" / "py-spy"


def dumps_of(name: str) -> dict[int, str]:
    return split_dumps((DATA / name).read_text())


def test_script_output_splits_into_one_dump_per_pid():
    dumps = dumps_of("local-socket-accept.txt")
    assert list(dumps) == [14300, 14301]
    assert dumps[14300].startswith("Process 14300: ")
    assert dumps[14301] == "Error: Failed to find python version from target process\n"


def test_dump_parses_threads_and_frames_innermost_first():
    dump = parse_py_spy_dump(14300, dumps_of("local-socket-accept.txt")[14300])
    assert dump.command == "/root/.pyenv/versions/3.11.7/bin/python3 srv.py"
    assert [(t.tid, t.state, t.name) for t in dump.threads] == [
        ("14300", "idle", "MainThread"),
        ("14387", "idle", "heartbeat"),
    ]
    assert dump.threads[0].frames == (
        Frame("socket.accept", "socket.py", 294),
        Frame("<module>", "srv.py", 7),
    )
    assert dump.threads[1].frames[-1] == Frame("Thread._bootstrap", "threading.py", 1002)


def test_a_process_that_is_not_python_is_py_spys_error():
    dump = parse_py_spy_dump(14301, dumps_of("local-socket-accept.txt")[14301])
    assert dump.error == "Error: Failed to find python version from target process"
    assert dump.threads == ()
    assert waiting_in(dump) is None


def test_the_wait_skips_generic_frames_of_the_main_thread():
    dump = parse_py_spy_dump(14300, dumps_of("local-socket-accept.txt")[14300])
    assert main_thread(dump) is dump.threads[0]
    assert waiting_in(dump) == Frame("<module>", "srv.py", 7)
    assert title(dump) == "srv.py"


def test_rank_lines_name_the_node_the_process_and_point_at_the_stacks():
    dumps = [parse_py_spy_dump(p, d) for p, d in dumps_of("local-socket-accept.txt").items()]
    lines = rank_lines("node1 (10.251.0.11)", dumps, "evidence/node1/stacks.txt")
    assert lines == [
        "node1 (10.251.0.11) pid 14300 srv.py: waiting in <module> (srv.py:7); "
        "stacks: evidence/node1/stacks.txt"
    ]


def test_no_py_spy_anywhere_says_so_with_the_install_command():
    none = (DATA / "local-no-py-spy.txt").read_text()
    line = no_stacks("node2 (10.251.0.12)", [(ON_HOST, none), (INSIDE, none)])
    found = "on the node: no py-spy; in its container: no py-spy"
    assert line == f"node2 (10.251.0.12): no stacks taken ({found}); {INSTALL}"
    assert "`sudo pip install py-spy` on the node" in INSTALL
    assert "aarch64" in INSTALL


def test_the_failure_lists_where_each_process_waits_before_the_tails():
    launch = plan_launch(load_inventory(ROOT / "inventories" / "lab-moe-tp2.yaml"), "r1")
    stacks = ["node1 (10.251.0.11) pid 7: waiting in f (x.py:1); stacks: evidence/node1/s"]
    where = {"node1": "node1 (10.251.0.11)", "node2": "node2 (10.251.0.12)"}
    watches = {n: NodeWatch(c, started=True, state="running") for n, c in launch.containers.items()}
    text = failure_text(launch, watches, where, {}, "distributed init", 60.0, None, stacks)
    assert "where each process waits (py-spy):\n  node1 (10.251.0.11) pid 7: waiting" in text
    assert text.index("(py-spy)") < text.index("--- node1 (10.251.0.11)")


def test_a_rank_alone_waits_in_the_store_called_from_its_caller():
    ((pid, text),) = dumps_of("local-torch-rendezvous-rank0-alone.txt").items()
    dump = parse_py_spy_dump(pid, text)
    assert waiting_in(dump) == Frame("_create_c10d_store", "torch/distributed/rendezvous.py", 199)
    lines = rank_lines("node1 (10.251.0.11)", [dump], "evidence/node1/stacks.txt")
    assert lines == [
        f"node1 (10.251.0.11) pid {pid} hang.py: waiting in "
        "_create_c10d_store (torch/distributed/rendezvous.py:199), called from <module> "
        "(hang.py:2); stacks: evidence/node1/stacks.txt"
    ]


def test_a_process_gone_before_its_dump_is_said_in_one_line_without_the_backtrace():
    ((pid, text),) = dumps_of("local-process-gone.txt").items()
    dump = parse_py_spy_dump(pid, text)
    assert dump.error == (
        "Error: Failed to get process executable name. Check that the process is running. "
        "Caused by: 0: No such file or directory (os error 2) "
        "1: No such file or directory (os error 2)"
    )
    assert rank_lines("node1 (10.251.0.11)", [dump], "evidence/node1/stacks.txt") == []


def test_a_vllm_launch_still_starting_names_each_process_by_its_step():
    """At the deadline the ranks were still importing: each process is named where it is,
    the API server and the headless node by the engine's own frame, no caller of theirs."""
    node1 = dumps_of("vllm-tp2-starting-node1.txt")
    dumps = [parse_py_spy_dump(pid, text) for pid, text in node1.items()]
    assert [title(d) for d in dumps] == [
        "vllm serve tiny-qwen3-moe",
        "-c from multiprocessing.resource_tracker",
        "-c from multiprocessing.spawn",
    ]
    lines = rank_lines("node1 (10.251.0.11)", dumps, "evidence/node1/stacks.txt")
    assert lines == [
        "node1 (10.251.0.11) pid 20347 vllm serve tiny-qwen3-moe: waiting in "
        "wait_for_engine_startup (vllm/v1/engine/utils.py:1398); stacks: evidence/node1/stacks.txt",
        "node1 (10.251.0.11) pid 20435 -c from multiprocessing.spawn: waiting in <module> "
        "(vllm/env_override.py:150); stacks: evidence/node1/stacks.txt",
    ]
    node2 = dumps_of("vllm-tp2-starting-node2.txt")
    headless = parse_py_spy_dump(20386, node2[20386])
    assert waiting_in(headless) == Frame(
        "WorkerProc.wait_for_ready", "vllm/v1/executor/multiproc_executor.py", 799
    )


def test_sglang_ranks_hung_in_group_creation_are_named_with_their_callers():
    """Both schedulers hang in torch's process group creation, called from SGLang's own
    init_distributed_environment; the launcher (SGLang's) waits for them; the resource
    tracker and the detokenizer, waiting in none of those, get no line."""
    for node, rank in (("node1", 0), ("node2", 1)):
        text = (DATA / f"sglang-tp2-init-hang-{node}.txt").read_text()
        dumps = [parse_py_spy_dump(pid, d) for pid, d in split_dumps(text).items()]
        where, stacks = f"{node} (addr)", f"evidence/{node}/stacks.txt"
        lines = rank_lines(where, dumps, stacks)
        scheduler = next(ln for ln in lines if f"sglang::scheduler_TP{rank}" in ln)
        assert scheduler.endswith(
            "waiting in _new_process_group_helper (torch/distributed/distributed_c10d.py:2169), "
            "called from init_distributed_environment (distributed/parallel_state.py:2517); "
            f"stacks: {stacks}"
        ), scheduler
        assert [ln.split(": ", 1)[0] for ln in lines] == [
            f"{where} pid {dumps[0].pid} -m sglang.launch_server --model-path",
            f"{where} pid {dumps[2].pid} sglang::scheduler_TP{rank}",
        ]


def lines_of(name: str, node: str) -> list[str]:
    dumps = [parse_py_spy_dump(pid, d) for pid, d in dumps_of(name).items()]
    return rank_lines(f"{node} (addr)", dumps, f"evidence/{node}/stacks.txt")


def test_vllm_ranks_hung_in_group_creation_are_named_with_their_callers():
    """Past their imports (the AVX-512 machine), both workers hang in torch's process group
    creation, called from vLLM's init_distributed_environment; the engine core and the
    headless node wait for them; the resource tracker gets no line."""
    for node in ("node1", "node2"):
        lines = lines_of(f"vllm-tp2-init-hang-{node}.txt", node)
        worker = next(ln for ln in lines if " VLLM::Worker: " in ln)
        assert worker.endswith(
            "waiting in _new_process_group_helper (torch/distributed/distributed_c10d.py:2169), "
            "called from init_distributed_environment (vllm/distributed/parallel_state.py:1953); "
            f"stacks: evidence/{node}/stacks.txt"
        ), worker
        assert not any("resource_tracker" in ln for ln in lines), lines
    [waits] = [ln for ln in lines_of("vllm-tp2-init-hang-node2.txt", "node2") if "serve" in ln]
    assert "waiting in WorkerProc.wait_for_ready" in waits


def test_a_request_hung_on_a_frozen_rank_names_the_collective_and_the_frozen_peer():
    """node2's rank frozen mid-load: node1's worker waits in all_reduce (vLLM's CPU
    communicator), node2's where it waited for the step it never got."""
    head = lines_of("vllm-tp2-load-hang-node1.txt", "node1")
    worker = next(ln for ln in head if "VLLM::Worker_TP0" in ln)
    assert (
        "waiting in all_reduce (torch/distributed/distributed_c10d.py:3252), called from " in worker
    )
    assert "CpuCommunicator.all_reduce (vllm/distributed/device_communicators/" in worker
    assert any("VLLM::EngineCore: waiting in SpinCondition.wait" in ln for ln in head), head
    peer = lines_of("vllm-tp2-load-hang-node2.txt", "node2")
    frozen = next(ln for ln in peer if "VLLM::Worker_TP1" in ln)
    assert "waiting in MessageQueue.recv (vllm/distributed/device_communicators/shm_b" in frozen
