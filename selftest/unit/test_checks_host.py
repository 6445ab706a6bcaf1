"""Host identity and Docker engine parsers and judges on recorded outputs."""

import socket
import subprocess
from pathlib import Path

import pytest

from infergate.checks.facts import ProbeError, docker_of, identity_of, memory_of
from infergate.checks.host import check_docker_engine, check_identity, parse_docker_version
from infergate.checks.memory import check_memory_available
from infergate.checks.probe import Section, parse_sections, probe_script

DATA = Path(__file__).parents[1] / "data"


def sections(name: str):
    return parse_sections((DATA / name).read_text())


def test_lab_node_identity():
    ident = identity_of(sections("lab/healthy-node2-probe.txt"))
    assert ident.hostname == "node2"
    assert ident.kernel.startswith("Linux 6.18")
    assert ident.os == "Debian GNU/Linux 12 (bookworm)"
    assert check_identity(ident.hostname, ident.kernel, {"node1": "node1"}) == []


def test_cloned_hostname_is_named():
    (problem,) = check_identity("spark", "Linux 6.11", {"spark2": "spark", "spark3": "other"})
    assert problem.found == "hostname 'spark', the same as spark2"
    assert "hostnamectl set-hostname" in problem.remedy


def test_running_engine_passes():
    engine = docker_of(sections("lab/healthy-node1-probe.txt"))
    assert engine.client == "28.2.2"
    assert engine.server
    assert engine.server.startswith("20.10")
    assert check_docker_engine(engine) == []


def test_stopped_engine_quotes_the_cli_and_says_how_to_start_it():
    engine = docker_of(sections("lab/docker-stopped-node2-probe.txt"))
    assert engine.server is None
    (problem,) = check_docker_engine(engine)
    assert problem.found.startswith("docker CLI 28.2.2 but no engine answered: Cannot connect")
    assert "node2/docker.sock" in problem.found
    assert "systemctl start docker" in problem.remedy


def test_socket_permission_denied_says_docker_group_not_start():
    engine = parse_docker_version(
        (DATA / "controller/docker-version-permission-denied.txt").read_text()
    )
    (problem,) = check_docker_engine(engine)
    assert "connect: permission denied" in problem.found
    assert problem.remedy.startswith("the plan's ssh user may not use the engine's socket")
    assert "usermod -aG docker" in problem.remedy
    assert "systemctl start" not in problem.remedy


def test_missing_cli_says_install():
    engine = parse_docker_version(
        (DATA / "controller/docker-version-not-installed.txt").read_text()
    )
    (problem,) = check_docker_engine(engine)
    assert problem.found == "no docker CLI (/bin/sh: 1: docker: not found)"


def test_memory_held_in_a_node_cgroup_is_read_from_its_walk():
    memory = memory_of(sections("lab/memory-held-node1-probe.txt"))
    node = memory.tightest_cgroup
    assert node is not None
    assert node.path == "/infergate-lab/node1"
    assert node.limit == 6 * 1024**3
    assert memory.usable < 2 * 1024**3 < memory.available
    (problem,) = check_memory_available(memory, 2.0)
    assert problem.remedy.startswith(
        "processes in cgroup /infergate-lab/node1 hold 4.1 GiB of its 6.0 GiB limit: list them "
        "with `ps -eo pid,rss,cgroup,comm --sort=-rss | grep -F /infergate-lab/node1 | head`"
    )


def test_failed_section_is_a_probe_error_naming_it():
    broken = {"meminfo": Section(1, "cat: /proc/meminfo: Permission denied")}
    with pytest.raises(ProbeError, match="`meminfo` failed on the node \\(exit 1\\): cat: "):
        memory_of(broken)


def test_a_daemon_that_hangs_is_named_as_hanging_not_as_a_missing_cli(tmp_path):
    """A real docker CLI against a socket that accepts and never answers (a wedged daemon),
    run by the real probe script under a 1 s section deadline (the finding names the
    probe's own, 8 s)."""
    hung = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(hung))
        server.listen()
        command = f"docker -H unix://{hung} version --format '{{{{json .}}}}'"
        script = probe_script((("docker-version", command),), timeout_s=1)
        ran = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    engine = docker_of(parse_sections(ran.stdout))
    assert engine.server is None
    (problem,) = check_docker_engine(engine)
    assert problem.found.startswith("`docker version` got no answer within 8 s")
    assert "journalctl -u docker" in problem.remedy
    assert "install" not in problem.remedy
