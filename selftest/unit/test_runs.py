"""Runs on the nodes, without the lab: run ids, the other-run judge and the removal's judge
on recorded `docker ps` output, the removal against a real Docker CLI whose daemon is down
or never answers, the cluster lock with the real flock(1), and SIGTERM / SIGHUP held during
teardown. The lab proves the rest (test_signals_lab.py)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml
from docker import DockerClient

from infergate.checks.containers import (
    check_foreign_containers,
    parse_docker_ps_json,
    parse_docker_stats_json,
)
from infergate.deploy.executor import Deployment
from infergate.deploy.failure import LaunchFailed
from infergate.deploy.removal import remove_run, run_containers
from infergate.deploy.runlock import (
    LOCK_DIR,
    MAX_WAIT_S,
    NO_LOCK_DIR,
    OPEN_LOCK_DIR,
    ClusterLock,
    Holder,
    busy_problem,
    by_machine,
    ended,
    first_line,
    lock_command,
    no_reply_problem,
    parse_lock_reply,
)
from infergate.deploy.runs import RUN_ID, check_removed, check_run_not_taken, of_runs
from infergate.deploy.state import DeployOptions, Say
from infergate.engines.registry import plan_launch
from infergate.fixtures import runs
from infergate.fixtures.inventory import INVENTORY_KEY
from infergate.fixtures.xdist import WORKER_TEARDOWN_S
from infergate.interrupts import sigint_deferred
from infergate.options import lock_wait_s
from infergate.plan.loader import load_plan
from infergate.plan.model import Inventory, parse_inventory
from infergate_lab.engine import Ran
from selftest.suite import LAB_PLAN, LOCKS_LOCALHOST, PHASE_DIRS, PROJECT_CONFIG, ROOT, closed_plan

DATA = Path(__file__).parents[1] / "data" / "runs"
OTHER = "20261201-030512-5f0c2a9e41b7d3c8"  # the recorded containers' run


def test_run_ids_carry_64_random_bits_and_stay_readable():
    ids = {runs.new_run_id() for _ in range(2000)}
    assert len(ids) == 2000
    for run_id in list(ids)[:20]:
        assert RUN_ID.fullmatch(run_id), run_id  # the grammar `infergate down --run` takes


def recorded() -> tuple[list, dict[str, int]]:
    ps = parse_docker_ps_json((DATA / "docker-ps-three-owners.txt").read_text())
    return ps, parse_docker_stats_json((DATA / "docker-stats-three-owners.txt").read_text())


def test_another_runs_containers_are_named_with_the_command_that_removes_that_run():
    containers, memory = recorded()
    problems = check_foreign_containers(
        containers, memory, (), "20261201-040000-0011223344556677", "inventories/lab.yaml"
    )
    text = "\n".join(p.describe() for p in problems)
    assert len(problems) == 3, text
    assert f"infergate-node1-{OTHER} of infergate run {OTHER} (plan lab, Up About a minute" in (
        text
    )
    assert f"run {OTHER} (the in-image probe, Up About a minute, holding 0.0 GiB)" in text
    cmd = f"infergate down --run {OTHER} --plan inventories/lab.yaml"
    assert text.count(cmd) == 2
    assert "container leftover-x (image iglab/busybox" in text


def test_this_runs_own_containers_and_probe_are_exempt():
    containers, memory = recorded()
    problems = check_foreign_containers(containers, memory, (), OTHER)
    assert [p.found.split()[1] for p in problems] == ["leftover-x"]


def test_the_run_listing_names_each_run_and_its_plan():
    found = of_runs(parse_docker_ps_json((DATA / "run-listing.txt").read_text()))
    assert {(c.run_id, c.plan) for c in found} == {(OTHER, "lab"), (OTHER, "(preflight probe)")}


def test_a_launch_whose_id_is_taken_names_the_containers():
    listing = parse_docker_ps_json((DATA / "run-listing.txt").read_text())
    (problem,) = check_run_not_taken(OTHER, [c.name for c in listing])
    assert problem.found == (
        f"container(s) infergate-node1-{OTHER}, modest_elion already there "
        f"with this run's name or label (run {OTHER})"
    )
    assert f"`docker inspect infergate-node1-{OTHER}`" in problem.remedy
    assert check_run_not_taken(OTHER, []) == []


@pytest.mark.parametrize(
    ("removal", "listing", "left", "expected", "cause"),
    [
        ((124, ""), (0, ""), [], "exited 124 (its deadline passed)", "the removal ran past"),
        (
            (255, "Connection reset"),
            (255, ""),
            [],
            "the listing after the removal exited 255",
            "SSH to the node failed during the removal (Connection reset)",
        ),
        (
            (0, ""),
            (0, ""),
            ["infergate-node1-x"],
            "still there after the removal: infergate-node1-x",
            "Docker left them",
        ),
    ],
)
def test_a_removal_is_judged_by_its_exit_and_a_separate_listing(
    removal, listing, left, expected, cause
):
    problems = check_removed("r1", removal, listing, left, "plan.yaml")
    assert expected in "\n".join(p.found for p in problems)
    assert problems[0].remedy.startswith(cause), problems[0].remedy
    assert "infergate down --run r1 --plan plan.yaml" in problems[0].remedy
    assert check_removed("r1", (0, ""), (0, ""), [], None) == []


# -- the removal against real Docker clients, from this machine (no daemon here)


def local_io(node: str, command: str, timeout_s: float, input: str | None = None) -> Ran:
    """Commands on this machine, as a node runs them (the kernel's OOM lines)."""
    done = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def lab_plan() -> Inventory:
    return parse_inventory(
        yaml.safe_load((Path(__file__).parents[2] / "inventories" / "lab.yaml").read_text())
    )


def started_handle(docker_host: str, timeout_s: int = 60, say: Say = lambda _: None) -> Deployment:
    """A handle on the lab plan whose every node's engine is DOCKER_HOST (the API version
    given: a client that asked would fail before the removal)."""
    plan = lab_plan()
    engines = {
        n.name: DockerClient(base_url=docker_host, version="1.41", timeout=timeout_s)
        for n in plan.nodes
    }
    options = DeployOptions(inventory_path="plan.yaml", engines=engines)
    launch = plan_launch(plan, "r-0011223344556677")
    handle = Deployment(launch, {n.name: n for n in plan.nodes}, local_io, say, options)
    handle.touched = True  # as after its first `docker run`
    return handle


def test_removal_that_docker_cannot_do_is_not_reported_as_stopped():
    said: list[str] = []
    handle = started_handle("unix:///nonexistent.sock", say=said.append)
    with pytest.raises(LaunchFailed) as failed:
        handle.stop()
    message = str(failed.value)
    assert "the removal of run r-0011223344556677 exited 1: Cannot connect to the Docker" in (
        message
    )
    assert "fix: Docker is not answering on the node: start it" in message
    assert re.search(r"\w+ \(\d+\.\d+\.\d+\.\d+\): ", message), message
    assert "infergate down --run r-0011223344556677 --plan plan.yaml" in (message)
    assert not any("stopped run" in s for s in said)


def test_removal_past_its_deadline_is_named_as_such():
    with socket.socket() as silent:  # a Docker endpoint that accepts and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        handle = started_handle(host, timeout_s=1)
        with pytest.raises(LaunchFailed) as failed:
            handle.stop()
    assert "exited 124 (its deadline passed)" in str(failed.value)


def test_a_refused_handle_removes_nothing():
    handle = started_handle("unix:///nonexistent.sock")
    handle.touched = False
    handle.close()  # would fail like the test above if it tried to remove


def test_the_removal_refuses_an_empty_run_id_and_never_reads_it_as_every_run():
    """An empty id was no filter: `down --run ''` removed every run's containers. No caller
    can get that by accident; only None means every run (`--all-runs`)."""
    client = DockerClient(base_url="unix:///nonexistent.sock", version="1.45")
    for run_id in ("", "  "):
        with pytest.raises(ValueError, match="give a run's id, or None for every run"):
            run_containers(client, run_id)
        with pytest.raises(ValueError, match="give a run's id"):
            remove_run(lambda: client, run_id, None)


# -- the cluster lock, with the real flock(1)


def holder(run_id: str) -> Holder:
    return Holder(run_id, "lab", "ci@runner", 4242, "2026-12-01T03:05:12Z")


def take(
    folder: Path, run_id: str, wait_s: float = 0, as_user: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    """The lock command in FOLDER, as the node's shell runs it (as AS_USER: a setpriv
    prefix), asked to take the lock: its MACHINE line read, its answer next."""
    request = subprocess.Popen(
        [*as_user, "sh", "-c", lock_command(holder(run_id), str(folder))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert request.stdout.readline().startswith("MACHINE ")
    request.stdin.write(f"take {wait_s}\n")
    request.stdin.flush()
    return request


def test_second_run_is_refused_naming_the_first_and_gets_it_once_released(tmp_path):
    first = take(tmp_path / "lock", "run-a")
    assert first.stdout.readline().strip() == "HELD"
    second = take(tmp_path / "lock", "run-b")
    out, _ = second.communicate(timeout=10)
    busy = parse_lock_reply(out.splitlines()[0])
    assert second.returncode == 75
    assert busy is not None
    assert busy.holder == holder("run-a")
    assert busy.verified
    problem = busy_problem(busy, 0, "node1 (10.251.0.11)")
    assert "held by run run-a (plan lab, by ci@runner, pid 4242" in problem.found
    assert f"`kill {busy.head_pid}` (the node verified that this process holds the lock)" in (
        problem.remedy
    )
    first.stdin.close()  # the run ends
    assert first.wait(timeout=5) == 0
    assert sorted(p.name for p in (tmp_path / "lock").iterdir()) == ["cluster.lock"]
    third = take(tmp_path / "lock", "run-c")
    assert third.stdout.readline().strip() == "HELD"
    refused = parse_lock_reply(take(tmp_path / "lock", "run-d").communicate(timeout=10)[0])
    assert refused is not None
    os.kill(int(refused.head_pid), signal.SIGTERM)  # an operator follows the remedy
    fourth = take(tmp_path / "lock", "run-d", wait_s=5)
    assert fourth.stdout.readline().strip() == "HELD"
    fourth.stdin.close()
    third.stdin.close()


def test_a_pid_the_node_cannot_verify_as_the_holder_is_never_offered_to_kill(tmp_path):
    """A stale note names a live process that is not the holder (here: a run waiting in
    the queue, whose fd 9 is the lock file without the lock): no `kill` of it is offered."""
    folder = tmp_path / "lock"
    first = take(folder, "run-a")
    assert first.stdout.readline().strip() == "HELD"
    waiter = take(folder, "run-b", wait_s=30)
    time.sleep(0.5)
    (folder / "holder.pid").write_text(f"{waiter.pid}\n")
    busy = parse_lock_reply(take(folder, "run-c").communicate(timeout=10)[0])
    assert busy is not None
    assert (busy.head_pid, busy.verified) == (str(waiter.pid), False)
    problem = busy_problem(busy, 0, "node1 (10.251.0.11)", str(folder))
    assert "kill" not in problem.remedy
    assert f"`fuser -v {folder}/cluster.lock` names the processes that have it open" in (
        problem.remedy
    )
    for pid in ("0", "self", "1 2"):  # forged notes: none of them is verified
        (folder / "holder.pid").write_text(pid)
        busy = parse_lock_reply(take(folder, "run-c").communicate(timeout=10)[0])
        assert busy is not None
        assert not busy.verified
    first.stdin.close()
    assert waiter.stdout.readline().strip() == "HELD"
    waiter.stdin.close()


def test_the_lock_is_the_ssh_users_alone_and_its_note_goes_with_it(tmp_path):
    """The folder is made 0700 and the file 0600 (a 0644 file let any local user hold the
    lock: flock needs only read access); a folder others can enter is refused."""
    first = take(tmp_path / "lock", "run-a")
    assert first.stdout.readline().strip() == "HELD"
    assert stat.S_IMODE((tmp_path / "lock").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "lock" / "cluster.lock").stat().st_mode) == 0o600
    assert json.loads((tmp_path / "lock" / "holder.json").read_text())["run_id"] == "run-a"
    first.stdin.close()
    first.wait(timeout=5)
    assert not (tmp_path / "lock" / "holder.json").exists()
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o755)
    refused = take(open_folder, "run-b")
    _, err = refused.communicate(timeout=10)
    assert refused.returncode == OPEN_LOCK_DIR
    assert f"{open_folder}: owner root, mode 755, SSH user root" in err
    assert not (open_folder / "cluster.lock").exists()


AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
AS_OTHER = ("setpriv", "--reuid=65533", "--regid=65533", "--clear-groups")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_a_non_root_ssh_user_is_told_what_to_provision_and_then_holds_it(tmp_path):
    """As `nobody`, the real lock command: a folder it cannot make, or root's, is a refusal
    that gives the commands to run as root; once provisioned that way, nobody takes the
    lock, and another user can neither hold nor open it."""
    public = Path(tempfile.mkdtemp(dir="/tmp", prefix="infergate-lock-"))
    try:
        public.chmod(0o755)  # traversable, not writable by others: like /run
        folder = public / "lock"
        refused = take(folder, "run-a", as_user=AS_NOBODY)
        _, err = refused.communicate(timeout=10)
        assert refused.returncode == NO_LOCK_DIR, err
        problem = no_reply_problem(refused.returncode, err, "node1 (10.251.0.11)", "nobody")
        assert "the SSH user nobody cannot make or write /run/infergate-lock on the node" in (
            problem.remedy
        )
        assert "`install -d -m 0700 -o nobody /run/infergate-lock` and `echo 'd " in problem.remedy
        assert "/etc/tmpfiles.d/infergate-lock.conf`" in problem.remedy
        folder.mkdir(mode=0o700)  # root's
        refused = take(folder, "run-a", as_user=AS_NOBODY)
        assert refused.wait(timeout=10) == OPEN_LOCK_DIR
        subprocess.run(["install", "-d", "-m", "0700", "-o", "nobody", str(folder)], check=True)
        held = take(folder, "run-a", as_user=AS_NOBODY)
        assert held.stdout.readline().strip() == "HELD"
        assert (folder / "cluster.lock").stat().st_uid == 65534
        other = subprocess.run(
            [*AS_OTHER, "flock", "-n", str(folder / "cluster.lock"), "true"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert other.returncode != 0
        assert "Permission denied" in other.stderr
        held.stdin.close()
        held.wait(timeout=5)
    finally:
        shutil.rmtree(public)


def test_a_failed_ssh_is_read_with_its_status_though_its_output_closed_first():
    """ssh closes its output a moment before it exits. Read then, the status was still None
    and a refused connection read as a head that never answered (a CI run on a slower
    machine). Here the gap is widened to 0.5 s."""
    refused = _requester(
        "exec >&-; echo 'ssh: connect to host 127.0.0.1 port 1: Connection "
        "refused' >&2; sleep 0.5; exit 255"
    )
    line = first_line(refused, 10)
    status, said = ended(refused, line)
    assert (line, status) == ("", 255)
    assert "Connection refused" in said
    silent = _requester("read line")  # ends when its stdin is closed
    line = first_line(silent, 0.3)
    assert (line, ended(silent, line)[0]) == (None, None)


def _requester(script: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["sh", "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


CONTROLLER = """
import subprocess, sys, time
held = subprocess.Popen(["sh", "-c", sys.argv[1]], stdin=subprocess.PIPE, text=True)
held.stdin.write("take 0\\n")
held.stdin.flush()
time.sleep(600)
"""


def test_a_killed_holder_frees_the_lock_with_its_pipe(tmp_path):
    """kill -9 of the holding controller: no clean-up code runs, the kernel closes its end
    of the pipe, the node's shell reads EOF and ends, and the lock with it."""
    command = lock_command(holder("run-a"), str(tmp_path))
    controller = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, command], stdout=subprocess.DEVNULL
    )
    while not (tmp_path / "holder.pid").exists():
        time.sleep(0.05)
    refused = take(tmp_path, "run-b")
    assert refused.communicate(timeout=10)[0].startswith("BUSY")
    controller.kill()
    controller.wait()
    waiting = take(tmp_path, "run-b", wait_s=5)
    assert waiting.stdout.readline().strip() == "HELD"
    waiting.stdin.close()


def test_a_waiting_run_gets_the_lock_when_the_first_ends(tmp_path):
    first = take(tmp_path, "run-a")
    assert first.stdout.readline().strip() == "HELD"
    second = take(tmp_path, "run-b", wait_s=20)
    threading.Timer(1.0, first.stdin.close).start()
    assert second.stdout.readline().strip() == "HELD"
    second.stdin.close()
    second.wait(timeout=5)


# `inf` crashed a run that found the lock held (a thread's join cannot wait that long)
BAD_WAITS = ["inf", "-inf", "nan", "-1", "86401", "1e400", "", "abc", "0x10", "1_000_000"]


@pytest.mark.parametrize("value", BAD_WAITS)
def test_a_lock_wait_outside_0_to_a_day_is_refused_naming_the_option(value):
    with pytest.raises(argparse.ArgumentTypeError, match="is not a number of seconds from 0 to"):
        lock_wait_s(value)
    assert lock_wait_s("86400") == MAX_WAIT_S
    assert lock_wait_s("0.5") == 0.5


def test_lock_wait_inf_is_a_usage_error_of_the_run(pytester, tmp_path):
    run = pytester.runpytest_subprocess(
        *PROJECT_CONFIG,
        f"--inventory={closed_plan(tmp_path)}",
        "--lock-wait",
        "inf",
        *PHASE_DIRS,
    )
    said = run.stdout.str() + run.stderr.str()
    assert run.ret == pytest.ExitCode.USAGE_ERROR, said
    assert "argument --lock-wait: 'inf' is not a number of seconds from 0 to 86400" in said
    assert "Traceback" not in said


def two_node_plan() -> Inventory:
    """Two local nodes, both this machine: one machine, whatever the plan calls it."""
    data = yaml.safe_load((ROOT / "inventories" / "h200-device.yaml").read_text())
    second = {"name": "h200b", "address": "127.0.0.2", "fabric": {"address": "127.0.0.2/8"}}
    data["nodes"].append({**data["nodes"][0], **second, "roles": []})
    data["engine"]["tensor_parallel"] = 4
    return parse_inventory(data)


def test_two_nodes_on_one_machine_share_one_lock_taken_once(tmp_path):
    lost: list[tuple[str, str]] = []
    lock = ClusterLock(
        two_node_plan(),
        tmp_path,
        holder("run-a"),
        lambda n, why: lost.append((n.name, why)),
        str(tmp_path / "lock"),
    )
    machines, unreachable, refusal = lock.take(0)
    assert ([[n.name for n in m] for m in machines], unreachable, refusal) == (
        [["h200", "h200b"]],
        [],
        None,
    )
    assert len(lock.held) == 1
    lock.release()
    assert lost == []


def test_every_plan_takes_the_machines_locks_in_one_order():
    """Two plans naming the same two machines differently, with another head: the same
    order, so two runs that wait for each other's lock never wait in a cycle."""
    plan = two_node_plan()
    a, b = plan.nodes
    one = by_machine([(a, "m2:b"), (b, "m1:b")])
    other = by_machine([(b, "m1:b"), (a, "m2:b")])
    assert list(one) == list(other) == ["m1:b", "m2:b"]
    assert list(by_machine([(a, "m1:b"), (b, "m1:b")]).values()) == [[a, b]]


def test_a_dropped_lock_session_is_reported_and_the_launch_check_names_the_new_holder(
    tmp_path,
):
    """The lock's session ends mid-run (its shell killed, as a dropped connection ends it):
    the watch reports it naming the node; a second run takes the cluster; the first run's
    check before its launch refuses naming that run; after it ends, the check takes it back."""
    plan, folder = two_node_plan(), str(tmp_path / "lock")
    lost: list[str] = []
    first = ClusterLock(
        plan, tmp_path, holder("run-a"), lambda n, why: lost.append(n.where + ": " + why), folder
    )
    assert first.take(0)[2] is None
    assert first.verify() == ([], None)  # held: nothing taken again
    (shell,) = [h.process for h in first.held]
    shell.kill()
    deadline = time.monotonic() + 5
    while not lost and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lost == ["h200 (localhost): its SSH session ended (exit -9)"]
    second = ClusterLock(plan, tmp_path, holder("run-b"), lambda n, why: lost.append(why), folder)
    assert second.take(0)[2] is None
    again, refusal = first.verify()
    assert again == []
    assert refusal is not None
    assert refusal.node.name == "h200"
    assert "the cluster lock is held by run run-b (plan lab" in refusal.problem(0).found
    second.release()
    again, refusal = first.verify()
    assert ([n.name for n in again], refusal) == (["h200"], None)
    first.release()


# -- signals during teardown


# SIGHUP, which detaches this process from its terminal: test_hangup.py, in a child
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_teardown_holds_ctrl_c_and_sigterm_until_it_is_done(number, tmp_path):
    finished = []
    deferred = sigint_deferred(tmp_path / "deploy.log")
    deferred.__enter__()
    os.kill(os.getpid(), number)
    finished.append("the removal ran to its end")
    with pytest.raises(KeyboardInterrupt):
        deferred.__exit__(None, None, None)
    assert finished
    said = (tmp_path / "deploy.log").read_text()
    assert said == f"{signal.Signals(number).name}: removing this run's containers first\n"


# -- SIGTERM and SIGHUP end a pytest run the way Ctrl-C does (teardown runs)

HOLDS_SOMETHING = """
import os, pathlib, time, pytest

@pytest.fixture(scope="session")
def held():
    pathlib.Path(f"started-{os.getpid()}").write_text("")
    yield
    time.sleep(1)  # a removal takes a while; the controller must wait for it
    pathlib.Path("torn-down").write_text(str(os.getpid()))

def test_long(held):
    time.sleep(120)
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "1"]], ids=["one-process", "xdist"])
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_run_teardown_as_ctrl_c_does(tmp_path, number, xdist):
    """A CI cancel (SIGTERM) or a closed terminal (SIGHUP) to pytest, or to xdist's
    controller alone: the session's teardown runs (the deployment's removal is there)."""
    (tmp_path / "test_holds.py").write_text(HOLDS_SOMETHING)
    plan = ROOT / "inventories" / "h200-device.yaml"  # any plan: nothing reaches its node
    argv = [
        sys.executable,
        "-m",
        "pytest",
        f"--inventory={plan}",
        "-p",
        "no:cacheprovider",
        "-q",
        *xdist,
        "test_holds.py",
    ]
    run = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    end = time.monotonic() + 60
    while not list(tmp_path.glob("started-*")) and time.monotonic() < end:
        time.sleep(0.1)
    run.send_signal(number)
    out = run.communicate(timeout=60)[0]
    assert (tmp_path / "torn-down").exists(), out
    assert run.returncode == 2, out  # pytest's "interrupted", as for Ctrl-C


@LOCKS_LOCALHOST
def test_deploy_down_names_a_node_it_cannot_clear_and_exits_1():
    """`deploy down` on the plan whose one node is this machine (connection: local), whose
    Docker has no daemon: the node, what Docker said, and the command to finish it."""
    plan = Path(__file__).parents[2] / "inventories" / "h200-device.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "infergate.cli", "down", "--run", OTHER, "--inventory", str(plan)],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock"},
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("h200 (localhost): 2 problem(s)")
    assert "exited 1: h200 (localhost): its Docker engine at unix:///nonexistent.sock does " in (
        done.stdout
    )
    assert f"infergate down --run {OTHER} --plan {plan}" in done.stdout


@LOCKS_LOCALHOST
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_run_is_refused_while_another_holds_the_cluster(pytester, xdist):
    """The plan whose one node is this machine: while another run holds its lock (the real
    lock, in /run/infergate-lock), the preflight is refused at once naming that run, in one
    process and under xdist (where the controller asks for it, once)."""
    plan = Path(__file__).parents[2] / "inventories" / "h200-device.yaml"
    other = take(Path(LOCK_DIR), "20261201-031500-aaaabbbbccccdddd", wait_s=30)
    try:
        assert other.stdout.readline().strip() == "HELD"
        run = pytester.runpytest_subprocess(
            *PROJECT_CONFIG,
            f"--inventory={plan}",
            "-m",
            "preflight",
            "--lock-wait",
            "0",
            *xdist,
            *PHASE_DIRS,
            "--report-dir",
            str(pytester.path / "reports"),
        )
    finally:
        other.stdin.close()
        other.wait(timeout=10)
    said = run.stdout.str() + run.stderr.str()
    assert run.ret == pytest.ExitCode.USAGE_ERROR, said
    # at once: idle workers have no teardown to wait for (the wait of an interrupted run)
    assert run.duration < WORKER_TEARDOWN_S, said
    assert "h200 (localhost): 1 problem(s)" in said
    assert "the cluster lock is held by run 20261201-031500-aaaabbbbccccdddd (plan lab, by " in (
        said
    )
    assert " passed" not in said


def test_a_head_ssh_cannot_reach_is_left_to_the_ssh_tests(pytester, tmp_path):
    """The lock is not taken when SSH cannot reach the head (nothing can start there), and
    the run goes on so that the SSH test names the head with its own remedy."""
    path = closed_plan(tmp_path)
    run = pytester.runpytest_subprocess(
        *PROJECT_CONFIG,
        f"--inventory={path}",
        "-m",
        "preflight",
        "-k",
        "ssh",
        "--lock-wait",
        "0",
        *PHASE_DIRS,
        "--report-dir",
        str(tmp_path / "reports"),
    )
    said = run.stdout.str()
    assert "infergate: cluster lock not taken: node1 (127.0.0.1) is unreachable over SSH" in said
    assert run.ret == pytest.ExitCode.TESTS_FAILED, said
    assert "node1 (127.0.0.1) is unreachable over SSH" in said.split("cluster lock not taken")[1]


@LOCKS_LOCALHOST
def test_deploy_down_leaves_the_run_that_holds_the_cluster(tmp_path):
    """A run that holds the lock is running: `deploy down --run` of it removes nothing and
    says so (its own teardown removes its containers)."""
    plan = ROOT / "inventories" / "h200-device.yaml"
    live = "20261201-032000-1111222233334444"
    other = take(Path(LOCK_DIR), live, wait_s=30)
    try:
        assert other.stdout.readline().strip() == "HELD"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "infergate.cli",
                "down",
                "--run",
                live,
                "--inventory",
                str(plan),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        other.stdin.close()
        other.wait(timeout=10)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith(f"h200 (localhost): the cluster lock is held by run {live} ")
    assert "it is running; nothing removed" in done.stdout


class _Controller:
    """What xdist's controller hook reads of its config: no pytest run needed."""

    def __init__(self, args: list[str], endpoint: str | None, planned: bool) -> None:
        self.args = args
        self.stash = pytest.Stash()
        if planned:
            self.stash[INVENTORY_KEY] = load_plan(LAB_PLAN)
        self.option = type("Option", (), {"collectonly": False})()
        self.endpoint = endpoint

    def getoption(self, name: str) -> str | None:
        assert name == "endpoint"
        return self.endpoint


PREFLIGHT_ID = "tests_preflight/test_host.py::t[node1]"
VENV_SUITE = ".venv/lib/python3.11/site-packages/infergate/tests_preflight"


@pytest.mark.parametrize(
    ("args", "ids", "endpoint", "planned", "locked"),
    [
        (["tests_preflight"], [PREFLIGHT_ID], None, True, True),
        # --pyargs: the ids start inside the suite's folder; the argument names the suite
        (["infergate.tests_preflight"], ["test_host.py::t[node1]"], None, True, True),
        (["infergate.tests_inference"], ["test_performance.py::t[c1]"], None, True, True),
        # --pyargs from a repo that holds the venv: the ids go through it to the suite
        (["infergate.tests_preflight"], [f"{VENV_SUITE}/test_host.py::t[node1]"], None, True, True),
        (["infergate.tests_inference"], ["test_performance.py::t[c1]"], "http://h/v1", True, False),
        (["selftest_dir"], ["test_other.py::t"], None, True, False),
        # --endpoint alone: no plan, no cluster to lock
        (["tests_preflight"], [PREFLIGHT_ID], "http://h/v1", False, False),
    ],
)
def test_the_xdist_controller_takes_the_lock_for_the_phases_collected(
    monkeypatch, args, ids, endpoint, planned, locked
):
    taken = []
    monkeypatch.setattr(runs, "take_lock", taken.append)
    controller = _Controller(args, endpoint, planned)
    runs.take_lock_for(controller, runs.phases_of(ids, controller.args))  # type: ignore[arg-type]
    assert bool(taken) is locked
