"""How a node's engine is found and what is said when it cannot be reached: the node's own
shell reads DOCKER_HOST and the socket's access (run here for real, also as a user outside
the socket's group), each address becomes a forward's target or a refusal that names the
node and the fix; ssh's own `-O check` without a master, and an engine that is not there."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import docker
import pytest
import yaml
from docker.errors import APIError

from infergate.plan.model import parse_inventory
from infergate.remote.docker_api import (
    _READ_HOST,
    API_ERRORS,
    EngineUnreachable,
    _check_master,
    _target,
    engine_said,
    node_engine,
)

ROOT = Path(__file__).resolve().parents[2]
LAB = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))
NODE = LAB.nodes[1]


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory any user may enter (pytest's own is this user's alone)."""
    path = Path(tempfile.mkdtemp(prefix="ig-sock-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def read_host(env: dict[str, str], as_nobody: bool = False) -> list[str]:
    argv = ["sh", "-c", _READ_HOST]
    if as_nobody:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_the_node_says_where_its_engine_listens_and_whether_it_may_open_it(open_dir):
    sock = open_dir / "docker.sock"
    host = f"unix://{sock}"
    assert read_host({"DOCKER_HOST": host}) == [host, "", "absent"]
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(sock))
        sock.chmod(0o660)
        if os.geteuid() == 0:
            assert read_host({"DOCKER_HOST": host}) == [host, "", "ok"]
            assert read_host({"DOCKER_HOST": host}, as_nobody=True) == [host, "", "denied"]
    assert read_host({}) == ["unix:///var/run/docker.sock", "", read_host({})[2]]
    tcp = {"DOCKER_HOST": "tcp://10.0.0.5:2376", "DOCKER_TLS_VERIFY": "1"}
    assert read_host(tcp) == ["tcp://10.0.0.5:2376", "1", "ok"]


def test_a_socket_or_a_tcp_address_is_forwarded_as_it_is():
    assert _target(NODE, "unix:///run/docker.sock", "", "ok") == "/run/docker.sock"
    assert _target(NODE, "tcp://10.0.0.5:2375", "", "ok") == "10.0.0.5:2375"


@pytest.mark.parametrize(
    ("host", "tls", "access", "said", "fix"),
    [
        (
            "unix:///var/run/docker.sock",
            "",
            "denied",
            "root may not open /var/run/docker.sock (permission denied)",
            "`sudo usermod -aG docker root`",
        ),
        (
            "unix:///var/run/docker.sock",
            "",
            "absent",
            "no socket at /var/run/docker.sock: dockerd is not running",
            "`sudo systemctl start docker`",
        ),
        (
            "tcp://10.0.0.5:2376",
            "1",
            "ok",
            "asks for TLS (DOCKER_TLS_VERIFY=1)",
            "unset DOCKER_TLS_VERIFY for SSH logins",
        ),
        (
            "ssh://admin@10.0.0.5",
            "",
            "ok",
            "only unix:// and tcp:// engines can be forwarded",
            "point DOCKER_HOST on the node at the engine's unix socket",
        ),
    ],
    ids=["denied", "absent", "tls", "ssh"],
)
def test_an_engine_that_cannot_be_forwarded_is_named_with_the_fix(host, tls, access, said, fix):
    with pytest.raises(EngineUnreachable) as refused:
        _target(NODE, host, tls, access)
    text = str(refused.value)
    assert text.startswith(f"node2 (10.251.0.12): its Docker engine at {host} (DOCKER_HOST)")
    assert said in text
    assert fix in text.split("fix: ", 1)[1]


def test_no_master_to_forward_through_is_named(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host node2\n  HostName 127.0.0.1\n  ControlPath none\n")
    with pytest.raises(EngineUnreachable) as refused:
        _check_master(NODE, config)
    assert str(refused.value).startswith(
        "node2 (10.251.0.12): no SSH master to forward its Docker socket through: "
    )


def test_an_engine_that_does_not_answer_is_named(monkeypatch, open_dir):
    local = replace(NODE, name="here", address="localhost")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{open_dir}/none.sock")
    with pytest.raises(EngineUnreachable) as refused, node_engine(local, None, open_dir):
        pass
    said = str(refused.value)
    assert said.startswith(f"here (localhost): its Docker engine at unix://{open_dir}/none.sock")
    assert "does not answer" in said
    assert "`sudo systemctl start docker` starts it" in said


def test_the_engine_is_quoted_in_its_own_words_else_the_error_is(open_dir):
    refused = APIError("404 Client Error: Not Found", explanation="No such image: x:1")
    assert engine_said(refused) == "No such image: x:1"
    client = docker.DockerClient(base_url=f"unix://{open_dir}/none.sock", version="1.41")
    with pytest.raises(API_ERRORS) as lost:  # no engine there: requests' own error
        client.containers.list()
    assert "No such file or directory" in engine_said(lost.value)
