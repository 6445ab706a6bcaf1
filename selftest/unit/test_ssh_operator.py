"""The operator's own ssh_config and the SSH masters, against the real ssh client and a
throwaway sshd: a plan never makes ssh parse a file (whose `Match exec` would run on the
controller), the operator's file is refused unless theirs alone, no user setting forwards
the controller's agent, and every master ends."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infergate.cli import main
from infergate.options import persist_seconds
from infergate.plan.model import parse_inventory
from infergate.remote.ssh import open_remotes
from infergate.remote.ssh_config import SshSetupError, prune
from infergate.remote.ssh_user_config import operator_ssh_config
from selftest.sshd import needs_sshd, throwaway_sshd
from selftest.suite import LAB_PLAN, closed_plan

# ssh runs this while it parses the file; the marker must never appear
MATCH_EXEC = 'Match exec "touch {marker}"\n  User nobody\n'
ENV = "INFERGATE_SSH_CONFIG"
NO_RUN = "20000101-000000-0000000000000000"  # a run id no container carries


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A home without an ssh_config, no plan and no operator's file in the environment."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("INFERGATE_INVENTORY", raising=False)


def infergate(*argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infergate.cli", *argv],
        cwd=cwd,
        env={**os.environ, **env},
        timeout=120,
        capture_output=True,
        text=True,
        check=False,
    )


def refused(done: subprocess.CompletedProcess[str], *said: str) -> None:
    """A usage error (exit 4) that says each of SAID, without a traceback."""
    output = done.stdout + done.stderr
    assert done.returncode == 4, output
    assert "Traceback" not in output, output
    for words in said:
        assert words in output, output


def hostile_plan(folder: Path, config: str) -> Path:
    """The closed lab plan whose nodes name CONFIG as their ssh.config."""
    path = closed_plan(folder)
    plan = yaml.safe_load(path.read_text())
    for node in plan["nodes"]:
        node["ssh"]["config"] = config
    path.write_text(yaml.safe_dump(plan))
    return path


def test_a_plan_naming_a_match_exec_file_runs_nothing_in_check_down_or_the_run(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "evil").write_text(MATCH_EXEC.format(marker=marker))
    plan = hostile_plan(tmp_path, str(tmp_path / "evil"))
    why = ("nodes[0].ssh.config", "--ssh-user-config or $INFERGATE_SSH_CONFIG")
    refused(infergate("plan", "check", f"--inventory={plan}", cwd=tmp_path), *why)
    refused(infergate("down", "--run", NO_RUN, f"--inventory={plan}", cwd=tmp_path), *why)
    refused(infergate("preflight", f"--inventory={plan}", "-p", "no:cacheprovider", cwd=tmp_path))
    assert not marker.exists()


def in_a_prompt(plan: Path, line: str) -> None:
    """PLAN with LINE in the first probe's prompt, a block scalar: a line of its own."""
    text = plan.read_text()
    first = re.search(r"^( *(?:- )?)prompt: .*$", text, re.MULTILINE)
    assert first
    indent = " " * (len(first[1]) + 2)
    block = f"{first[1]}prompt: |\n" + "".join(
        f"{indent}{part}\n" for part in ("Say yes.", *line.splitlines())
    )
    plan.write_text(text[: first.start()] + block + text[first.end() + 1 :])


def test_a_plan_naming_itself_runs_nothing(tmp_path):
    """The `Match exec` line hidden in a prompt of the plan that names itself as its
    ssh_config, or that the operator's environment names."""
    marker = tmp_path / "ran"
    plan = hostile_plan(tmp_path, str(tmp_path / "closed-plan.yaml"))
    in_a_prompt(plan, MATCH_EXEC.format(marker=marker))
    refused(infergate("plan", "check", f"--inventory={plan}", cwd=tmp_path), "nodes[0].ssh.config")
    refused(infergate("down", "--run", NO_RUN, f"--inventory={plan}", cwd=tmp_path))
    plan = closed_plan(tmp_path)
    in_a_prompt(plan, MATCH_EXEC.format(marker=marker))
    done = infergate(
        "down", "--run", NO_RUN, f"--inventory={plan}", cwd=tmp_path, **{ENV: str(plan)}
    )
    refused(done, f"${ENV}", "is the plan itself")
    assert not marker.exists()


def users(path: Path, text: str = "", mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_operators_file_comes_from_the_option_the_environment_or_the_default(
    tmp_path, monkeypatch
):
    assert operator_ssh_config(None) is None  # no ~/.ssh/config: none read
    (tmp_path / ".ssh").mkdir()
    default = users(tmp_path / ".ssh" / "config")
    assert operator_ssh_config(None) == default
    monkeypatch.setenv(ENV, str(users(tmp_path / "from-env")))
    assert operator_ssh_config(None) == tmp_path / "from-env"
    assert operator_ssh_config(str(users(tmp_path / "given"))) == tmp_path / "given"
    assert operator_ssh_config("none") is None
    monkeypatch.setenv(ENV, "none")
    assert operator_ssh_config(None) is None


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("missing", "No such file or directory"),
        ("group-writable", "is writable by group or others (mode 620)"),
        ("others'", "belongs to uid 65534, not this user"),
        ("a folder", "is not a regular file"),
        ("a fifo", "is not a regular file"),
        ("the plan", "is the plan itself"),
        ("a glob", "not a path an Include reads whole"),
        ("a newline", "not a path an Include reads whole"),
        ("empty", "not a path an Include reads whole"),
    ],
)
def test_an_operators_file_that_others_control_is_refused_naming_where_it_came_from(
    tmp_path, monkeypatch, case, said
):
    plan = closed_plan(tmp_path)
    made = {
        "missing": lambda: str(tmp_path / "absent"),
        "group-writable": lambda: str(users(tmp_path / "c", mode=0o620)),
        "others'": lambda: str(owned_by_nobody(users(tmp_path / "c"))),
        "a folder": lambda: str(tmp_path),
        "a fifo": lambda: str(fifo(tmp_path / "f")),
        "the plan": lambda: str(plan),
        "a glob": lambda: str(tmp_path / "*"),
        "a newline": lambda: f"{tmp_path}/c\n  ProxyCommand id",
        "empty": lambda: "",
    }[case]()
    monkeypatch.setenv(ENV, made)
    with pytest.raises(SshSetupError, match=f"^\\${ENV} .*{re.escape(said)}"):
        operator_ssh_config(None, plan)
    with pytest.raises(SshSetupError, match=f"^--ssh-user-config .*{re.escape(said)}"):
        operator_ssh_config(made, plan)


def owned_by_nobody(path: Path) -> Path:
    os.chown(path, 65534, 65534)
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (("--ssh-persist=-5",), {}, "argument --ssh-persist: '-5' is not a whole number"),
        (("--ssh-persist=²",), {}, "argument --ssh-persist: '²' is not a whole number"),
        ((), {ENV: ""}, f"${ENV} '': not a path"),
        (("--ssh-user-config=/nonexistent",), {}, "--ssh-user-config '/nonexistent': No such"),
    ],
)
def test_a_bad_ssh_option_of_a_run_is_a_usage_error_naming_it(tmp_path, args, env, said):
    plan = closed_plan(tmp_path)
    run = ("preflight", f"--inventory={plan}", "-p", "no:cacheprovider", *args)
    refused(infergate(*run, cwd=tmp_path, **env), said)


@pytest.mark.parametrize("text", ["abc", "99999999", "86401", "1e3", " 5", "٣"])
def test_ssh_persist_is_whole_seconds_up_to_a_day(text):
    with pytest.raises(argparse.ArgumentTypeError, match="is not a whole number of seconds"):
        persist_seconds(text)
    assert (persist_seconds("0"), persist_seconds("86400")) == (0, 86_400)


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (("plan", "check"), {ENV: ""}, f"${ENV} '': not a path"),
        (("plan", "check"), {ENV: "/nonexistent"}, f"${ENV} '/nonexistent': No such file"),
        (("plan", "check"), {ENV: "/tmp/*"}, f"${ENV} '/tmp/*': not a path"),
        (("plan", "check"), {ENV: "/etc/x\nProxyCommand id"}, f"${ENV} '/etc/x\\nProxyCommand"),
        (("plan", "check", "--ssh-user-config=/dev/null"), {}, "is not a regular file"),
        (("plan", "check", "--ssh-user-config=/"), {}, "--ssh-user-config '/' is not a regular"),
        (("down", "--run", NO_RUN), {ENV: "/nonexistent"}, f"${ENV} '/nonexistent': No such"),
        (("down", "--run", NO_RUN, "--ssh-user-config="), {}, "--ssh-user-config '': not a path"),
    ],
)
def test_a_bad_ssh_option_of_check_or_down_is_a_usage_error_naming_it(
    tmp_path, monkeypatch, capsys, args, env, said
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main([*args, f"--inventory={closed_plan(tmp_path)}"]) == 4
    assert said in capsys.readouterr().err


def test_a_socket_folder_too_long_is_a_usage_error_naming_it_and_the_fix(
    tmp_path, monkeypatch, capsys
):
    long = tmp_path / ("d" * 60)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    assert main(["plan", "check", f"--inventory={closed_plan(tmp_path)}"]) == 4
    said = capsys.readouterr().err
    assert said.startswith(f"{long}/infergate-ssh-{os.getuid()}/%C-"), said
    assert "fix: set TMPDIR to a shorter folder" in said


def test_old_plan_files_of_the_control_folder_are_pruned_and_nothing_else(tmp_path):
    now = time.time()
    old, fresh = now - 31 * 86_400, now - 86_400
    names = {
        "ssh_config-lab-0123456789ab": old,
        "known_hosts-lab-0123456789ab": old,
        "ssh_config-lab-0123456789ab.4242": old,
        "known_hosts-other-ba9876543210": fresh,
        "notes.txt": old,
        "0123456789abcdef-c5ba3980db": old,  # a master's socket name, not a plan's file
    }
    for name, when in names.items():
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, (when, when))
    (tmp_path / "known_hosts-x-0123456789ab").symlink_to(tmp_path / "notes.txt")
    assert sorted(prune(tmp_path, now)) == sorted(list(names)[:3])
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {*list(names)[3:], "known_hosts-x-0123456789ab"}


@pytest.fixture
def sshd_node(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A throwaway sshd and the plan that reaches it (its host key known)."""
    folder = tmp_path / "sshd"
    folder.mkdir()
    with throwaway_sshd(folder) as port:
        host_key = (folder / "host.pub").read_text().split()[:2]
        (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_key)}\n")
        data = yaml.safe_load(LAB_PLAN.read_text())
        data["nodes"] = data["nodes"][:1]
        data["engine"]["pipeline_parallel"] = 1
        data["nodes"][0]["address"] = "127.0.0.1"
        data["nodes"][0]["ssh"] = {
            "port": port,
            "key": str(folder / "client"),
            "known_hosts": str(folder / "known_hosts"),
        }
        plan = tmp_path / "plan.yaml"
        plan.write_text(yaml.safe_dump(data))
        yield plan, int((folder / "pid").read_text())


def sessions(sshd_pid: int) -> list[str]:
    """The sshd's live sessions: one child per connection (a master is one)."""
    children = Path(f"/proc/{sshd_pid}/task/{sshd_pid}/children").read_text().split()
    return [Path(f"/proc/{c}/cmdline").read_bytes().decode(errors="replace") for c in children]


def no_sessions(sshd_pid: int, within_s: float) -> list[str]:
    deadline = time.monotonic() + within_s
    while sessions(sshd_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return sessions(sshd_pid)


@needs_sshd
def test_a_users_forward_agent_yes_does_not_reach_the_node(sshd_node, tmp_path, monkeypatch):
    plan, _ = sshd_node
    agent_sock = tmp_path / "agent"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(agent_sock)], stdout=subprocess.DEVNULL)
    try:
        while not agent_sock.exists():
            time.sleep(0.05)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(agent_sock))
        user = users(tmp_path / "config", "Host *\n  ForwardAgent yes\n  ForwardX11 yes\n")
        inventory = parse_inventory(yaml.safe_load(plan.read_text()))
        with open_remotes(inventory, plan, 0, user) as remotes:
            said = remotes["node1"].run("echo ${SSH_AUTH_SOCK:-none}").stdout
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    assert said == "none\n"


@needs_sshd
def test_down_ends_the_master_it_opened(sshd_node, tmp_path):
    plan, sshd_pid = sshd_node
    done = infergate("down", "--run", NO_RUN, f"--inventory={plan}", cwd=tmp_path)
    assert "node1 (127.0.0.1)" in done.stdout, done.stdout + done.stderr  # reached, no Docker
    assert no_sessions(sshd_pid, 2) == []


@needs_sshd
def test_a_master_left_behind_ends_on_its_own(sshd_node):
    plan, sshd_pid = sshd_node
    inventory = parse_inventory(yaml.safe_load(plan.read_text()))
    with open_remotes(inventory, plan, 1, None) as remotes:
        assert remotes["node1"].run("true").exit_status == 0
    assert sessions(sshd_pid)  # the master outlives the run by --ssh-persist
    assert no_sessions(sshd_pid, 5) == []
