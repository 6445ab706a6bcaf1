"""The host probe script itself, run for real under this machine's /bin/sh (dash)."""

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infergate.checks.probe import HOST_SECTIONS, check_probe_printed, parse_sections, probe_script
from infergate.fixtures.facts import ProbeSilent, _probe
from infergate.fixtures.hosts import Remote
from infergate.inventory import Ssh, parse_inventory

LAB = parse_inventory(
    yaml.safe_load((Path(__file__).resolve().parents[1] / "inventories/lab.yaml").read_text())
)


def test_probe_runs_under_posix_sh_and_yields_every_section():
    out = subprocess.run(
        ["/bin/sh", "-c", probe_script(HOST_SECTIONS)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    sections = parse_sections(out)
    assert list(sections) == [name for name, _ in HOST_SECTIONS]
    assert sections["meminfo"].rc == 0
    assert "MemAvailable:" in sections["meminfo"].text
    assert sections["cgroup-memory"].text.splitlines()[-1].startswith("/ ")


def test_probe_section_deadline_ends_a_hung_command():
    script = probe_script((("slow", "sleep 30"), ("after", "echo still here")), timeout_s=1)
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=10)
    sections = parse_sections(out.stdout)
    assert sections["slow"].rc == 124  # timeout's own exit status
    assert sections["after"].text == "still here"


def test_parse_sections_keeps_blank_lines_inside_a_section():
    sections = parse_sections("\n@@@ a 0\nx\n\ny\n\n@@@ b 3\nboom\n")
    assert sections["a"].text == "x\n\ny"
    assert (sections["b"].rc, sections["b"].text) == (3, "boom")


def test_a_node_without_gnu_timeout_is_named_with_the_probe_exit_and_stderr(tmp_path, monkeypatch):
    """The real probe through the suite's Remote on a controller whose PATH has a shell and no
    `timeout`: no section is printed, and the failure says which node, exit 127 and why."""
    (tmp_path / "sh").symlink_to(shutil.which("sh"))
    monkeypatch.setenv("PATH", str(tmp_path))
    remote = Remote(dataclasses.replace(LAB.nodes[1], ssh=Ssh(connection="local")), None, 5)
    with pytest.raises(ProbeSilent) as silent:
        _probe(remote, probe_script(HOST_SECTIONS))
    message = str(silent.value)
    assert message.startswith(
        "node2 (10.251.0.12): found the host probe printed no sections (exit 127): "
    )
    assert "timeout: not found" in message
    assert "fix: install GNU coreutils on the node" in message


def test_a_silent_probe_with_no_stderr_points_at_the_login_shell():
    problem = check_probe_printed(parse_sections("Welcome to node2\n"), 0, "")
    assert problem.found == "the host probe printed no sections (exit 0): nothing on stderr"
    assert "shell start-up file" in problem.remedy
    assert check_probe_printed(parse_sections("\n@@@ a 1\nboom\n"), 0, "") is None
