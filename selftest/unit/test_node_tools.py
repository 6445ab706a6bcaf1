"""The node's tools: one red naming every command a node lacks with the package that provides
it, and the checks that need one skipped, naming that red. The case is the recorded 1xH200 host
without iproute2 and Docker (data/h200-1/preflight-no-docker-no-iproute2.txt: 8 failed and 3
errors, each "sh: 1: ip: not found"), made again here: this machine as a local-connection node
whose PATH lacks `ip`, `ss` and `docker`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infergate.catalogue import CHECKS
from infergate.catalogue_doc import readme_with_tools
from infergate.checks.probe import Section
from infergate.checks.tools import BY_NAME, check_node_tools, missing_tools, needed_missing
from selftest.suite import LOCKS_LOCALHOST, ROOT, run_suite

DEVICE_PLAN = ROOT / "inventories" / "h200-device.yaml"
TOOLS_RED = "test_host.py::test_node_tools_present[h200]"
DEBIAN = {"ID": "debian"}


def test_one_problem_names_each_command_and_its_package_for_the_nodes_family():
    lacking = tuple(BY_NAME[t] for t in ("ip", "ss", "docker"))
    (problem,) = check_node_tools(lacking, {"ID": "ubuntu", "ID_LIKE": "debian"})
    assert problem.found == (
        "no `ip` (iproute2 / iproute), `ss` (iproute2 / iproute), `docker` (docker.io / "
        "docker-ce) on the PATH"
    )
    assert problem.remedy.startswith("apt-get install -y iproute2 docker.io;")
    (rhel,) = check_node_tools(lacking[:2], {"ID": "rocky", "ID_LIKE": "rhel centos fedora"})
    assert rhel.remedy.startswith("dnf install -y iproute (")
    (other,) = check_node_tools(lacking[:1], {"ID": "alpine"})
    assert other.remedy.startswith("apt-get install -y iproute2 (Debian, Ubuntu), or dnf ")
    assert check_node_tools((), DEBIAN) == []


def test_gpu_tools_are_needed_on_gpu_nodes_only():
    tools = missing_tools({"tools": Section(0, "nvidia-smi\nping\nnot-ours\n")})
    assert tools == ("nvidia-smi", "ping")
    assert [t.name for t in needed_missing(tools, gpus=0)] == ["ping"]
    assert [t.name for t in needed_missing(tools, gpus=8)] == ["nvidia-smi", "ping"]
    assert missing_tools({}) == ()  # an older probe's sections: nothing claimed missing


def test_every_tool_a_check_needs_is_one_the_probe_asks_for():
    assert {t for e in CHECKS.values() for t in e.tools} <= set(BY_NAME)


def test_readme_tools_table_is_current():
    readme = (ROOT / "README.md").read_text()
    assert readme == readme_with_tools(readme), "run: python scripts/problem_docs.py"


def path_without(folder: Path, lacking: set[str]) -> str:
    """A PATH of one FOLDER with a link to every command of this machine's but LACKING."""
    folder.mkdir()
    for place in os.environ["PATH"].split(os.pathsep):
        for command in Path(place).glob("*") if Path(place).is_dir() else ():
            link = folder / command.name
            if command.name not in lacking and not link.exists() and os.access(command, os.X_OK):
                link.symlink_to(command)
    return str(folder)


@LOCKS_LOCALHOST
def test_a_node_without_ip_ss_and_docker_is_one_red_naming_them_and_their_packages(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    lacking = {"ip", "ss", "docker", "nvidia-smi"}  # nvidia-smi: whether this machine has it or not
    monkeypatch.setenv("PATH", path_without(pytester.path / "bin", lacking))
    run = run_suite(pytester, "-m", "preflight", inventory=DEVICE_PLAN)
    assert TOOLS_RED in run.red(), run.output
    said = run.message(TOOLS_RED)
    for named in ("`ip` (iproute2 / iproute)", "`ss` (iproute2 / iproute)", "`docker` (docker.io"):
        assert named in said, said
    assert "apt-get install -y iproute2 " in said
    assert " docker.io" in said
    assert [t for t, o in run.outcomes.items() if o.status == "error"] == [], run.output
    assert "not found" not in run.output  # no check reads a section that could not run
    needs = ("test_docker_engine_answers[h200]", "test_engine_ports_free_on_every_node")
    for test in (*needs, "test_no_memory_pressure_on_unified_memory[h200]"):
        outcome = next(o for t, o in run.outcomes.items() if t.endswith(test))
        assert outcome.status == "skipped", (test, outcome.message)
        assert "(test_node_tools_present[h200])" in outcome.message, outcome.message
