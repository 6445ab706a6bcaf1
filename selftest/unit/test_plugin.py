"""The plugin as pytest loads it from its entry point, in a folder that is not this clone:
the phase markers, where the plan comes from, the options it refuses, --strict."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from infergate.fixtures.plugin import auto_workers
from selftest.suite import closed_plan

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "inventories" / "lab.yaml"
# the report header (not shown under -q) names the plan read
COLLECT = ("--pyargs", "infergate.tests_preflight", "--collect-only", "-p", "no:cacheprovider")


@pytest.fixture(autouse=True)
def no_plan_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERGATE_INVENTORY", raising=False)


def plan_named(folder: Path, name: str) -> Path:
    """The lab's plan under another name (the report header shows which plan was read)."""
    data = yaml.safe_load(LAB.read_text())
    data["name"] = name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return folder / f"{name}.yaml"


def said(run: pytest.RunResult) -> str:
    return run.stdout.str() + run.stderr.str()


def test_pyargs_from_another_folder_gets_the_phase_markers(pytester: pytest.Pytester) -> None:
    preflight = pytester.runpytest_subprocess(*COLLECT, f"--inventory={LAB}", "-qm", "preflight")
    others = pytester.runpytest_subprocess(*COLLECT, f"--inventory={LAB}", "-qm", "not preflight")
    assert preflight.ret == pytest.ExitCode.OK, said(preflight)
    assert "test_host.py::test_ssh_reachable_facts_gathered[node1]" in said(preflight)
    assert others.ret == pytest.ExitCode.NO_TESTS_COLLECTED, said(others)


def test_without_a_plan_the_run_says_how_to_give_one(pytester: pytest.Pytester) -> None:
    run = pytester.runpytest_subprocess(*COLLECT)
    assert run.ret == pytest.ExitCode.USAGE_ERROR, said(run)
    assert "no plan: give the deployment plan (YAML) as --plan=PATH, or in the " in said(run)
    assert "INFERGATE_INVENTORY=PATH" in said(run)
    assert "`infergate_inventory = PATH`" in said(run)


@pytest.mark.parametrize(
    ("given", "read"),
    [(("ini",), "ini"), (("ini", "env"), "env"), (("ini", "env", "option"), "option")],
    ids=["ini", "env-over-ini", "option-over-env"],
)
def test_the_plan_comes_from_the_option_then_env_then_ini(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, given: tuple[str, ...], read: str
) -> None:
    """The ini's path is relative to the ini file's folder (conf/), not to the current one."""
    plans = {name: plan_named(pytester.path / "conf", name) for name in ("ini", "env", "option")}
    (pytester.path / "conf" / "pytest.ini").write_text("[pytest]\ninfergate_inventory = ini.yaml\n")
    if "env" in given:
        monkeypatch.setenv("INFERGATE_INVENTORY", str(plans["env"]))
    option = [f"--plan={plans['option']}"] if "option" in given else []
    run = pytester.runpytest_subprocess(*COLLECT, "-c", "conf/pytest.ini", *option)
    assert run.ret == pytest.ExitCode.OK, said(run)
    assert f"inventory: {read} (vllm, 2 nodes" in said(run)


def test_a_separate_plan_path_outside_the_ini_folder_is_refused(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--plan PATH` as two words: pytest has taken PATH for a test path when it chose
    its rootdir and ini file; one word (=) is read as the plan, as is a plan in the ini's
    folder."""
    repo, outside = pytester.path / "repo", plan_named(pytester.path / "elsewhere", "other")
    inside = plan_named(repo, "inside")
    (repo / "pytest.ini").write_text("[pytest]\n")
    monkeypatch.chdir(repo)
    two_words = pytester.runpytest_subprocess(*COLLECT, "--plan", str(outside))
    one_word = pytester.runpytest_subprocess(*COLLECT, f"--plan={outside}")
    in_repo = pytester.runpytest_subprocess(*COLLECT, "--inventory", str(inside))
    assert two_words.ret == pytest.ExitCode.USAGE_ERROR, said(two_words)
    assert f"write --plan={outside} (one word)" in said(two_words)
    assert one_word.ret == pytest.ExitCode.OK, said(one_word)
    assert "inventory: other (" in said(one_word)
    assert in_repo.ret == pytest.ExitCode.OK, said(in_repo)
    assert "inventory: inside (" in said(in_repo)


ANSIBLE_PLUGIN = """
def pytest_addoption(parser):
    parser.getgroup("pytest-ansible").addoption("--inventory", dest="ansible_inventory")


def pytest_report_header(config):
    return f"ansible inventory: {config.getoption('ansible_inventory')}"
"""


def fake_pytest_ansible(folder: Path) -> Path:
    """A folder for PYTHONPATH that installs a distribution named pytest-ansible, whose plugin
    declares --inventory as the real one does (the real one needs Ansible, and collides with
    testinfra's --connection besides: pytest-dev/pytest-testinfra#58)."""
    info = folder / "pytest_ansible-25.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pytest-ansible\nVersion: 25.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nansible = fake_ansible\n")
    (folder / "fake_ansible.py").write_text(ANSIBLE_PLUGIN)
    return folder


def test_beside_pytest_ansible_the_plan_is_given_as_plan(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both plugins declaring --inventory was argparse's "conflicting option strings". (Given,
    pytest-ansible's --inventory sets testinfra's ansible_inventory, which the plugin refuses.)"""
    monkeypatch.setenv("PYTHONPATH", str(fake_pytest_ansible(pytester.path / "site")))
    run = pytester.runpytest_subprocess(*COLLECT, f"--plan={LAB}")
    assert run.ret == pytest.ExitCode.OK, said(run)
    assert "inventory: lab (vllm, 2 nodes" in said(run)
    assert "ansible inventory: None" in said(run)  # the other plugin was loaded


@pytest.mark.parametrize(
    ("option", "key"),
    [
        ("--hosts=ssh://a,ssh://b", "nodes[*].name and nodes[*].address"),
        ("--connection=paramiko", "nodes[*].ssh.connection"),
        ("--ssh-config=/etc/ssh/ssh_config", "nodes[*].ssh (user, port, key"),
        ("--ssh-extra-args=-4", "nodes[*].ssh (user, port, key"),
        ("--ssh-identity-file=/k/id", "nodes[*].ssh.key"),
        ("--sudo", "nodes[*].ssh.user"),
        ("--sudo-user=admin", "nodes[*].ssh.user"),
        ("--ansible-inventory=hosts.ini", "infergate plan from-ansible INVENTORY"),
        ("--force-ansible", "nodes[*].ssh.connection"),
    ],
)
def test_a_testinfra_host_option_is_refused_naming_the_plan_key(
    pytester: pytest.Pytester, option: str, key: str
) -> None:
    run = pytester.runpytest_subprocess(*COLLECT, f"--inventory={LAB}", option)
    assert run.ret == pytest.ExitCode.USAGE_ERROR, said(run)
    assert f"ERROR: {option.split('=')[0]}: infergate reaches the nodes its plan names; " in (
        said(run)
    )
    assert key in said(run)


UNCONFIGURED = """
from infergate.fixtures.plugin import skip_unconfigured

def test_baseline(pytestconfig):
    skip_unconfigured(pytestconfig, "no baseline file: set inference.baseline")
"""


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_a_check_without_thresholds_skips_or_fails_under_strict(
    pytester: pytest.Pytester, strict: bool
) -> None:
    pytester.makepyfile(test_unconfigured=UNCONFIGURED)
    plan = closed_plan(pytester.path)
    strict_args = ["--strict"] if strict else []
    run = pytester.runpytest_subprocess(
        f"--inventory={plan}", "-p", "no:cacheprovider", "-rsf", *strict_args
    )
    run.assert_outcomes(failed=1) if strict else run.assert_outcomes(skipped=1)
    assert "no baseline file: set inference.baseline" in said(run)
    if not strict:  # the summary points at the test's own line, not the helper's
        assert "SKIPPED [1] test_unconfigured.py:" in said(run)


def test_the_performance_tests_skip_only_through_the_strict_helper() -> None:
    """Their five skips for a missing threshold, goodput floor, baseline or roofline floor
    each fail under --strict."""
    source = (ROOT / "tests_inference" / "test_performance.py").read_text()
    assert "pytest.skip(" not in source
    assert source.count("skip_unconfigured(") == 5


@pytest.mark.parametrize(
    ("given", "backstop"), [((), "600.0s"), (("-o", "timeout=7"), "7.0s")], ids=["none", "ini"]
)
def test_a_run_without_a_timeout_of_its_own_gets_the_backstop(
    pytester: pytest.Pytester, given: tuple[str, ...], backstop: str
) -> None:
    """A user's repository whose ini says nothing of pytest-timeout still gets a backstop."""
    run = pytester.runpytest_subprocess(*COLLECT, f"--inventory={LAB}", *given)
    assert f"timeout: {backstop}" in said(run)


GROUPED = """
import pytest

pytestmark = pytest.mark.xdist_group("deployment")


@pytest.mark.parametrize("i", range(6))
def test_one_launch(i):
    pass
"""


def test_xdist_alone_runs_a_group_on_one_worker(pytester: pytest.Pytester) -> None:
    """`-n 2` with no --dist: xdist's `load` would split the deployment's tests over both
    workers, each launching the same run (and the in-image tests' one rendezvous). The
    workers parse `-n 2` again, so they too must know the run goes by group; and pytest
    9.2's node ids ignore xdist 3.8's group suffix (pytest-xdist#1386), hence the pin."""
    pytester.makepyfile(test_grouped=GROUPED)
    run = pytester.runpytest_subprocess(
        f"--inventory={closed_plan(pytester.path)}", "-p", "no:cacheprovider", "-n", "2", "-v"
    )
    ran = [line for line in run.stdout.lines if "PASSED" in line]
    assert len(ran) == 6, said(run)
    assert all(line.rstrip().endswith("@deployment") for line in ran), said(run)
    assert len({line.split()[0] for line in ran}) == 1, said(run)  # one worker: [gw0] or [gw1]


WHERE_AM_I = """
def test_where():
    pass
"""


def plan_of(folder: Path, count: int) -> Path:
    """The lab's plan with COUNT nodes, at most 243 (one /24), on closed loopback ports."""
    data = yaml.safe_load(LAB.read_text())
    node2 = data["nodes"][1]
    data["nodes"] = data["nodes"][:1] + [
        {**copy.deepcopy(node2), "name": f"node{i}", "fabric": {"address": f"10.252.0.{i + 11}/24"}}
        for i in range(2, count + 1)
    ]
    data["engine"]["pipeline_parallel"] = count  # one CPU rank per node
    folder.mkdir(parents=True, exist_ok=True)
    return closed_plan(folder, data)


def ran_on(pytester: pytest.Pytester, plan: Path) -> str:
    pytester.makepyfile(test_where=WHERE_AM_I)
    run = pytester.runpytest_subprocess(
        f"--inventory={plan}", "-p", "no:cacheprovider", "-n", "auto", "-v"
    )
    assert run.ret == pytest.ExitCode.OK, said(run)
    return said(run)


@pytest.mark.parametrize(
    ("nodes", "cores", "workers"),
    [
        (2, 2, 0),
        (16, 2, 0),
        (128, 2, 0),
        (141, 2, 2),
        (1024, 2, 2),
        (16, 16, 0),
        (74, 16, 0),
        (75, 16, 16),
        (1024, 1, 0),
    ],
)
def test_auto_starts_workers_only_where_they_pay_for_their_start_up(
    nodes: int, cores: int, workers: int
) -> None:
    assert auto_workers(nodes, cores) == workers


def test_n_auto_on_a_plan_of_two_nodes_runs_in_one_process(pytester: pytest.Pytester) -> None:
    """The facts are read once, every node at once, in one process: two workers would each
    pay pytest's start-up for 2 nodes' judging (`make bench`: 2.2x slower)."""
    out = ran_on(pytester, closed_plan(pytester.path))
    assert "test_where.py::test_where PASSED" in out
    assert "created:" not in out  # xdist's line when it starts workers


def test_n_auto_on_a_plan_of_many_nodes_starts_a_worker_per_core(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    cores = len(os.sched_getaffinity(0))
    out = ran_on(pytester, plan_of(tmp_path, 200))
    if cores == 1:
        assert "created:" not in out
    else:
        assert f"created: {cores}/{cores} workers" in out
        assert "] PASSED test_where.py::test_where" in out  # "[gw0] PASSED ..."


def test_n_auto_keeps_xdist_s_own_variable(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "2")
    out = ran_on(pytester, closed_plan(pytester.path))
    assert "created: 2/2 workers" in out
    assert "] PASSED test_where.py::test_where" in out


def test_another_projects_run_is_left_as_it_is(pytester: pytest.Pytester) -> None:
    """infergate installed beside a project that is not a cluster's: its plain pytest run,
    -n included, knows nothing of a plan, and its own fixture named `inventory` wins."""
    pytester.makepyfile(
        conftest="import pytest\n\n@pytest.fixture\ndef inventory():\n    return 'theirs'\n",
        test_theirs="def test_plain(inventory):\n    assert inventory == 'theirs'\n",
    )
    run = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert run.ret == pytest.ExitCode.OK, said(run)
    assert "inventory:" not in said(run)  # no plan header
    assert not list(pytester.path.glob("reports")), "the plugin wrote a report folder"
    parallel = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    assert parallel.ret == pytest.ExitCode.OK, said(parallel)


def test_a_run_of_the_suite_without_a_plan_is_still_refused(pytester: pytest.Pytester) -> None:
    """Named by path (the installed suite's folder) rather than by package."""
    from infergate.suites import suite_folders

    ini = pytester.makeini("[pytest]\n")  # not this clone's, which names the lab's plan
    run = pytester.runpytest_subprocess("-c", str(ini), str(suite_folders()[0]), "--collect-only")
    assert run.ret == pytest.ExitCode.USAGE_ERROR, said(run)
    assert "no plan: give the deployment plan" in said(run)
