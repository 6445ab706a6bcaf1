"""What a plan grants its containers on every node beyond the gate's own options: read off
engine.docker_args and model.path (`privileged_grants`, pure), shown in `plan check` and the
run's header, and refused by the operator's policy (--forbid-privileged, --allow-privileged
or their ini keys) as a usage error that names the plan key, before any node is reached."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from infergate.engines.container import (
    Grant,
    allowed_grants,
    privileged_grants,
    refused_grants,
)
from infergate.plan.loader import load_plan
from selftest.suite import LAB_PLAN, closed_plan

INFERGATE = Path(sys.executable).parent / "infergate"
INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
LAB = load_plan(LAB_PLAN)
MODEL = LAB.model.path


def arg0(name: str) -> tuple[str, str]:
    return name, "engine.docker_args[0]"


def granted(docker_args: list[str], model_path: str = MODEL) -> list[tuple[str, str]]:
    engine = replace(LAB.engine, docker_args=tuple(docker_args))
    inventory = replace(LAB, engine=engine, model=replace(LAB.model, path=model_path))
    return [(g.name, g.key) for g in privileged_grants(inventory)]


@pytest.mark.parametrize(
    ("docker_args", "model_path", "grants"),
    [
        # the issue's: root on every node, through the plan alone
        (["--privileged"], MODEL, [arg0("privileged")]),
        (["-v", "/:/host"], MODEL, [arg0("mount:/")]),
        (["--cap-add", "ALL"], MODEL, [arg0("cap:ALL")]),
        ([], "/var/run/docker.sock", [("mount:/var/run/docker.sock", "model.path")]),
        # each form the docker CLI takes, normalised as Docker reads it
        (["--privileged=true"], MODEL, [arg0("privileged")]),
        (["--privileged=false"], MODEL, []),
        (["--cap-add=cap_sys_admin"], MODEL, [arg0("cap:SYS_ADMIN")]),
        (["--volume=//etc/./:/e:ro"], MODEL, [arg0("mount:/etc")]),
        (["-v", "/var:/v"], MODEL, [arg0("mount:/var")]),
        (
            ["-v", "/run/containerd/containerd.sock:/c"],
            MODEL,
            [arg0("mount:/run/containerd/containerd.sock")],
        ),
        (["-v", "/home/u/docker.sock:/d"], MODEL, [arg0("mount:/home/u/docker.sock")]),
        (["-v", "/dev/shm:/dev/shm"], MODEL, [arg0("mount:/dev/shm")]),
        (["-v", "/root:/r"], MODEL, [arg0("mount:/root")]),
        (["-v", "/root/.ssh/id_ed25519:/k"], MODEL, [arg0("mount:/root/.ssh/id_ed25519")]),
        (["--device", "/dev/fuse"], MODEL, [arg0("device:/dev/fuse")]),
        (
            ["--security-opt", "seccomp=unconfined"],
            MODEL,
            [arg0("security-opt:seccomp=unconfined")],
        ),
        (["--security-opt=apparmor:unconfined"], MODEL, [arg0("security-opt:apparmor=unconfined")]),
        (["-u", "0:0"], MODEL, [arg0("user:root")]),
        (["--user=root"], MODEL, [arg0("user:root")]),
        ([], "/", [("mount:/", "model.path")]),
        ([], "/etc", [("mount:/etc", "model.path")]),
        # what grants nothing: a user's data, a named volume, the gate's own namespaces
        (["-v", "/root/.cache/vllm:/root/.cache/vllm"], MODEL, []),
        (["-v", "/srv/cache:/root/.cache", "-v", "hf:/hf", "-v", "/anon"], MODEL, []),
        (["--ipc", "host", "--network=host", "--shm-size", "8g", "-e", "A=/:/x"], MODEL, []),
        (["--user", "1000:1000", "--security-opt", "no-new-privileges"], MODEL, []),
        ([], "/home/u/models/x", []),
        # each grant named with its own key, in the plan's order
        (
            ["-e", "X=1", "--privileged", "-v", "/:/host", "--cap-add", "SYS_PTRACE"],
            "/run/docker.sock",
            [
                ("mount:/run/docker.sock", "model.path"),
                ("privileged", "engine.docker_args[2]"),
                ("mount:/", "engine.docker_args[3]"),
                ("cap:SYS_PTRACE", "engine.docker_args[5]"),
            ],
        ),
    ],
)
def test_privileged_grants_name_each_grant_and_its_key(
    docker_args: list[str], model_path: str, grants: list[tuple[str, str]]
) -> None:
    assert granted(docker_args, model_path) == grants


@pytest.mark.parametrize("path", sorted(INVENTORIES.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_shipped_plans_grant_nothing(path: Path) -> None:
    """`make demo` runs under --forbid-privileged too: the lab's cache mount is no grant."""
    assert privileged_grants(load_plan(path)) == ()


def test_an_allow_list_reads_grant_names_as_docker_does() -> None:
    allowed = allowed_grants(" privileged, cap:sys_admin,mount:/dev/shm/ ,,user:root")
    assert allowed == {"privileged", "cap:SYS_ADMIN", "mount:/dev/shm", "user:root"}
    assert allowed_grants("") == frozenset()


@pytest.mark.parametrize(
    "entry", ["privilegedx", "cap:", "mount:dev/shm", "mount:/a b", "seccomp=unconfined", "\x1b"]
)
def test_an_allow_list_entry_that_is_no_grant_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="is not a grant: write privileged, cap:NAME"):
        allowed_grants(f"privileged,{entry}")


def test_the_policy_refuses_only_what_the_allow_list_leaves_out() -> None:
    grants = [Grant("privileged", "k0", ""), Grant("mount:/dev/shm", "k1", "")]
    assert refused_grants(grants, allowed_grants("mount:/dev/shm")) == grants[:1]
    assert refused_grants(grants, allowed_grants("")) == grants
    assert refused_grants(grants, allowed_grants("privileged,mount:/dev/shm")) == []


def privileged_plan(folder: Path, docker_args: list[str], model_path: str = MODEL) -> Path:
    """The lab's plan on a closed port (no node reachable) with these grants."""
    data = yaml.safe_load(closed_plan(folder).read_text())
    data["engine"]["docker_args"] = docker_args
    data["model"]["path"] = model_path
    path = folder / "privileged.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def infergate(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed command, its `ssh` one that notes any call (no refusal may reach one)."""
    shim = cwd / "bin" / "ssh"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f'#!/bin/sh\necho "$*" >> {cwd}/ssh-called\nexit 255\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("INFERGATE_INVENTORY", None)
    return subprocess.run(
        [str(INFERGATE), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


GRANTS = {
    "privileged": (["--privileged"], MODEL, "engine.docker_args[0] asks for privileged"),
    "capability": (
        ["--cap-add", "SYS_ADMIN"],
        MODEL,
        "engine.docker_args[0] asks for cap:SYS_ADMIN",
    ),
    "device": (["--device=/dev/kmsg"], MODEL, "engine.docker_args[0] asks for device:/dev/kmsg"),
    "mount": (["-v", "/etc:/host-etc"], MODEL, "engine.docker_args[0] asks for mount:/etc"),
    "engine-socket": ([], "/var/run/docker.sock", "model.path asks for mount:/var/run/docker.sock"),
    "unconfined": (
        ["--security-opt", "apparmor=unconfined"],
        MODEL,
        "engine.docker_args[0] asks for security-opt:apparmor=unconfined",
    ),
    "user-root": (["--user", "root"], MODEL, "engine.docker_args[0] asks for user:root"),
}


@pytest.mark.parametrize("grant", list(GRANTS))
def test_plan_check_forbid_privileged_refuses_each_grant_naming_its_key(
    grant: str, tmp_path: Path
) -> None:
    docker_args, model_path, says = GRANTS[grant]
    plan = privileged_plan(tmp_path, docker_args, model_path)
    shown = infergate("plan", "check", f"--inventory={plan}", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert says.split(" asks for ")[1] in shown.stdout  # the plan's grants, listed
    refused = infergate("plan", "check", f"--inventory={plan}", "--forbid-privileged", cwd=tmp_path)
    assert refused.returncode == 4, refused.stdout + refused.stderr
    name = says.split(" asks for ")[1]
    assert refused.stderr.startswith(f"--forbid-privileged: the plan {plan} grants its containers")
    assert f"\n  {says}: " in refused.stderr
    assert refused.stderr.endswith(f"or allow it: --allow-privileged={name}\n")
    allowed = infergate(
        "plan", "check", f"--inventory={plan}", f"--allow-privileged={name}", cwd=tmp_path
    )
    assert allowed.returncode == 0, allowed.stderr


def test_a_run_under_forbid_privileged_stops_before_any_node(tmp_path: Path) -> None:
    """`infergate preflight --forbid-privileged`: a usage error at configure, no ssh run."""
    plan = privileged_plan(tmp_path, ["--privileged", "--cap-add", "ALL"], "/")
    argv = ("preflight", f"--inventory={plan}", "--forbid-privileged", "-p", "no:cacheprovider")
    ran = infergate(*argv, cwd=tmp_path)
    assert ran.returncode == 4, ran.stdout + ran.stderr
    assert ran.stderr.startswith(f"ERROR: --forbid-privileged: the plan {plan} grants its")
    for says in ("model.path asks for mount:/", "[0] asks for privileged", "[1] asks for cap:ALL"):
        assert says in ran.stderr
    assert "Traceback" not in ran.stdout + ran.stderr
    assert not (tmp_path / "ssh-called").exists()


def test_the_operators_ini_holds_the_allow_list_the_plan_cannot(tmp_path: Path) -> None:
    """infergate_allow_privileged in the operator's pytest.ini: what it names runs, the rest
    is refused naming the ini key; the header lists every grant with its key."""
    plan = privileged_plan(tmp_path, ["-v", "/dev/shm:/dev/shm", "--cap-add", "ALL"])
    ini = "[pytest]\ninfergate_allow_privileged = mount:/dev/shm\n"
    (tmp_path / "pytest.ini").write_text(ini)
    argv = ("preflight", f"--inventory={plan}", "-p", "no:cacheprovider", "--collect-only")
    refused = infergate(*argv, cwd=tmp_path)
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "ERROR: ini infergate_allow_privileged: the plan" in refused.stderr
    assert "engine.docker_args[2] asks for cap:ALL: every capability" in refused.stderr
    assert "mount:/dev/shm" not in refused.stderr.split("\nfix:")[0]
    (tmp_path / "pytest.ini").write_text(ini.replace("/dev/shm", "/dev/shm,cap:ALL"))
    header = infergate(*argv, cwd=tmp_path)
    assert header.returncode == 0, header.stdout + header.stderr
    assert "privileged: beyond the gate's own (host network and IPC" in header.stdout
    assert "  mount:/dev/shm (engine.docker_args[0]): the node's /dev/shm, writable" in (
        header.stdout
    )
    assert "  cap:ALL (engine.docker_args[2]): every capability" in header.stdout


def test_the_header_says_when_the_plan_grants_nothing(tmp_path: Path) -> None:
    plan = closed_plan(tmp_path)
    argv = ("preflight", f"--inventory={plan}", "--forbid-privileged", "--collect-only")
    ran = infergate(*argv, "-p", "no:cacheprovider", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "privileged: the plan asks for nothing beyond the gate's own" in ran.stdout
