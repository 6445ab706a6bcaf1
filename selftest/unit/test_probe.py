"""The host probe script itself, run for real under this machine's /bin/sh (dash)."""

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infergate.checks.facts import ProbeError, identity_of, section_text
from infergate.checks.probe import (
    HOST_SECTIONS,
    check_probe_printed,
    parse_sections,
    plan_sections,
    probe_script,
)
from infergate.fixtures.facts import read_fact
from infergate.plan.model import Ssh, parse_inventory
from infergate.preflight.host import ProbeSilent
from infergate.preflight.host import probe_node as _probe
from infergate.remote.fanout import on_every_node
from infergate.remote.ssh import Remote
from infergate.waiting import LOOK_AT

LAB = parse_inventory(
    yaml.safe_load((Path(__file__).resolve().parents[2] / "inventories/lab.yaml").read_text())
)
NODE2 = dataclasses.replace(LAB.nodes[1], ssh=Ssh(connection="local"))


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
    with pytest.raises(ProbeError) as ended:  # not "failed", not "section missing"
        section_text(sections, "slow")
    assert str(ended.value).startswith(
        "the probe's `slow` ran past its 8 s (checks.probe.SECTION_TIMEOUT_S) and was ended "
        "(exit 124): what it printed is partial\n    fix: the node is slow or something on it "
        "hangs: look at what `slow` runs, on the node under `time`"
    )


def test_a_probe_its_deadline_ended_is_reported_as_a_timeout_naming_its_section():
    """The real probe through the suite's Remote, with a section that outlasts the whole
    probe's deadline: the test of a fact fails naming the node, the probe, the deadline with
    its plan key and the section it was in, where the sections it never printed would read as
    missing."""
    remote = Remote(NODE2, None, 1)
    planned = (("hostname", "hostname"), ("uname", "sleep 5; uname -srm"), ("os-release", "true"))
    (outcome,) = on_every_node({"node2": remote}, lambda r: _probe(r, planned)).values()
    with pytest.raises(pytest.fail.Exception) as failed:
        read_fact(NODE2, outcome, identity_of)
    assert str(failed.value) == (
        "node2 (10.251.0.12): the host probe ran past its 1 s (thresholds.command_timeout_s) "
        "and was ended (exit 124): what it printed is partial\n"
        "    fix: the node is slow or something on it hangs: look at the section it was in, "
        f"`uname` (run `sleep 5; uname -srm` on the node under `time`), then {LOOK_AT}; "
        "raise thresholds.command_timeout_s if it is just slow"
    )


def test_a_section_learns_whether_the_one_before_it_printed(tmp_path):
    """`container-memory` skips `docker stats` (a second of sampling) when `containers`,
    right before it, listed nothing: a docker on PATH that lists from a file and logs every
    call shows one call per probe with nothing running, two with something."""
    log, listing = tmp_path / "calls", tmp_path / "listing"
    docker = tmp_path / "docker"
    docker.write_text(f'#!/bin/sh\necho "$1" >>{log}\n[ "$1" = ps ] && cat {listing}\ntrue\n')
    docker.chmod(0o755)
    names = [name for name, _ in plan_sections("img", "/m")]
    at = names.index("containers")
    assert names[at + 1] == "container-memory"
    planned = plan_sections("img", "/m")[at : at + 2]
    calls = []
    for listed in ("", '{"ID":"4f2a"}\n'):
        listing.write_text(listed)
        log.write_text("")
        env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
        script = ["/bin/sh", "-c", probe_script(planned)]
        out = subprocess.run(script, capture_output=True, text=True, timeout=30, env=env)
        assert [s.rc for s in parse_sections(out.stdout).values()] == [0, 0]
        calls.append(log.read_text().split())
    assert calls == [["ps"], ["ps", "stats"]]


def test_parse_sections_keeps_blank_lines_inside_a_section():
    sections = parse_sections("\n@@@ a 0\nx\n\ny\n\n@@@ b 3\nboom\n")
    assert sections["a"].text == "x\n\ny"
    assert (sections["b"].rc, sections["b"].text) == (3, "boom")


def test_a_node_without_gnu_timeout_is_named_with_the_probe_exit_and_stderr(tmp_path, monkeypatch):
    """The real probe through the suite's Remote on a controller whose PATH has a shell and no
    `timeout`: no section is printed, and the failure says which node, exit 127 and why."""
    (tmp_path / "sh").symlink_to(shutil.which("sh"))
    monkeypatch.setenv("PATH", str(tmp_path))
    remote = Remote(NODE2, None, 5)
    with pytest.raises(ProbeSilent) as silent:
        _probe(remote, HOST_SECTIONS)
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
