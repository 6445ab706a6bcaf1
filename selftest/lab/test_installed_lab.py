"""The installed form, as a user meets it: the wheel built from this tree, installed by its
name (pytest-infergate) and without extras into a fresh virtualenv, run from a "user repo"
folder that holds only a plan and a pytest.ini, against the lab. Its preflight must give the
same results as the clone's, its inference report must list every test it ran, and its
command must judge plans and Ansible inventories the same way the library does. Last, a
newcomer's first hour, pytest-ansible installed beside it."""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infergate.reports.inference_json import read_results
from infergate_lab import Lab
from infergate_lab.engine import serving_alone
from selftest.lab.test_deploy_lab import plan_file, short_sweep
from selftest.lab.test_inference_lab import SERVED
from selftest.suite import LAB_PLAN, ROOT, SuiteRun, read_junit, run_folder_in
from selftest.unit.test_plan_init import filled, todos

# building the wheel and installing its dependencies (from the package registry, or pip's
# cache) takes a minute or two; each preflight run, seconds to a minute
pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]

HOSTILE = ROOT / "selftest" / "data" / "plans-hostile"
ANSIBLE = ROOT / "selftest" / "data" / "ansible"
# not test_inference_lab's: a leftover of that server is never taken for this one
PORT, CONTAINER = 18434, "installed-smoke"
CLIENT_TEST = "test_conformance.py::test_openai_client_works_end_to_end"


def sh(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def tracked_tree(into: Path) -> Path:
    """This tree as a clone would have it (tracked files and new ones git does not ignore),
    so the wheel is built from what would be committed, not from build leftovers."""
    listed = sh(["git", "ls-files", "-co", "--exclude-standard", "-z"], ROOT).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tracked_tree(tmp_path_factory.mktemp("tree"))
    out = tmp_path_factory.mktemp("dist")
    built = sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), "."], tree)
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("pytest_infergate-*.whl")
    return path


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel, installed by its name as a user would (the bare
    `infergate` is another project on PyPI), and its declared dependencies: no extra."""
    where = tmp_path_factory.mktemp("venv")
    made = sh([sys.executable, "-m", "venv", str(where)], where)
    assert made.returncode == 0, made.stderr
    version = wheel.name.split("-")[1]
    ours = ["-f", str(wheel.parent), f"pytest-infergate=={version}"]
    installed = sh([str(where / "bin" / "pip"), "install", "-q", *ours], where)
    assert installed.returncode == 0, installed.stderr
    return where


@pytest.fixture(scope="module")
def server(engine: object, lab: Lab) -> Iterator[str]:
    """SmolLM2 served alone on node1, as test_inference_lab's server, for the installed
    suite's inference tests (`infergate smoke --endpoint`)."""
    with serving_alone(lab, "node1", SERVED, PORT, CONTAINER, serve=["--enforce-eager"]) as base:
        yield base


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    """A user's repository: their plan and a pytest.ini naming it, nothing of ours."""
    shutil.copy(ROOT / "inventories" / "lab.yaml", tmp_path / "plan.yaml")
    (tmp_path / "pytest.ini").write_text("[pytest]\ninfergate_inventory = plan.yaml\n")
    return tmp_path


def user_env(venv: Path) -> dict[str, str]:
    """The user's shell: the venv's commands first, and nothing of this clone importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    return env


def run_installed(venv: Path, repo: Path, argv: list[str]) -> SuiteRun:
    junit = repo / "junit.xml"
    done = sh([*argv, f"--junitxml={junit}", "-p", "no:cacheprovider"], repo, user_env(venv))
    assert junit.exists(), done.stdout + done.stderr
    return SuiteRun(read_junit(junit), done.stdout + done.stderr)


def test_wheel_holds_the_product_and_not_the_lab(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert "fixtures" not in tops, "a top-level `fixtures` clashes with PyPI's `fixtures`"
    assert not any(t.startswith("infergate_lab") for t in tops), "the lab is root-only"
    for module in ("fixtures/plugin.py", "tests_preflight/test_host.py", "checks/scripts"):
        assert any(n.startswith(f"infergate/{module}") for n in names), module
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[pytest11]" in text
    assert "infergate = infergate.cli:main" in text
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    said = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Name: pytest-infergate\n" in said
    lines = said.splitlines()
    needs = {n.removeprefix("Requires-Dist: ") for n in lines if n.startswith("Requires-Dist: ")}
    extras = {n for n in needs if n.startswith(("matplotlib", "openai"))}
    assert extras == {'matplotlib>=3.8; extra == "plots"', 'openai>=1.40; extra == "openai"'}


def test_installed_preflight_agrees_with_the_clone(venv, user_repo, healthy_preflight):
    """`infergate preflight` runs `python -m pytest --pyargs infergate.tests_preflight -m
    preflight` (test_cli), the form the README gives for plain pytest: one run proves both."""
    clone = healthy_preflight
    command = run_installed(venv, user_repo, ["infergate", "preflight"])
    statuses = {t: o.status for t, o in clone.outcomes.items()}
    assert statuses, clone.output
    assert "test_host.py::test_ssh_reachable_facts_gathered[node1]" in statuses
    assert "test_in_image.py::test_rendezvous_all_reduce_across_nodes" in statuses
    assert {t: o.status for t, o in command.outcomes.items()} == statuses, command.output


def test_the_user_repo_imports_the_installed_package(venv, user_repo):
    where = sh(
        ["python", "-c", "import infergate.fixtures.plugin as p; print(p.__file__)"],
        user_repo,
        user_env(venv),
    )
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr


def test_installed_command_judges_plans(venv, user_repo):
    expected = yaml.safe_load((HOSTILE / "expected.yaml").read_text())
    name = "dup-engine-block"
    bad = HOSTILE / f"{name}.yaml"
    checked = sh(["infergate", "plan", "check", "--inventory", str(bad)], user_repo, user_env(venv))
    assert checked.returncode == 4, checked.stdout + checked.stderr
    assert expected[name]["says"] in checked.stdout + checked.stderr
    good = sh(["infergate", "plan", "check", "--inventory", "plan.yaml"], user_repo, user_env(venv))
    assert good.returncode == 0, good.stdout + good.stderr


def test_installed_command_reads_an_ansible_inventory(venv, user_repo):
    inventory = ANSIBLE / "ini" / "sparks.ini"
    argv = ["infergate", "plan", "from-ansible", str(inventory), "--group", "sparks"]
    made = sh(argv, user_repo, user_env(venv))
    assert made.returncode == 0, made.stderr
    plan = yaml.safe_load(made.stdout)
    assert [n["name"] for n in plan["nodes"]] == ["spark-01", "spark-02"], made.stdout


def test_installed_inference_report_lists_every_test(venv, user_repo, server):
    """From the wheel the node ids start inside the suite's package (test_x.py::...), not in
    its folder: report.html and results.json still list every test's outcome; without the
    extras the report says how to get its plots and the official client's test how to get
    that client."""
    plan_file(user_repo, short_sweep, base=LAB_PLAN)  # the user's plan.yaml, its sweep short
    report = user_repo / "report"
    argv = ["infergate", "smoke", f"--endpoint={server}/v1", f"--report-dir={report}"]
    run = run_installed(venv, user_repo, argv)
    ran = {test.split("::", 1)[1]: outcome.status for test, outcome in run.outcomes.items()}
    assert len(ran) > 10, run.output
    folder = run_folder_in(report)
    listed = {o.name: o.status for o in read_results(folder / "results.json").conformance}
    assert listed == ran, run.output
    page = (folder / "report.html").read_text()
    assert [name for name in ran if html.escape(name) not in page] == []
    assert "No plots: matplotlib is not installed" in page
    assert run.outcomes[CLIENT_TEST].status == "skipped", run.output
    assert "pip install 'pytest-infergate[openai]'" in run.message(CLIENT_TEST)


# last in the module: it installs pytest-ansible into the module's virtualenv
def test_a_newcomers_first_hour(venv, wheel, server, tmp_path):
    """From an empty folder with the installed wheel: the version, a first plan fixed in one
    pass, a URL smoked with no plan, another project's pytest; then pytest-ansible beside it,
    and both work."""
    empty, env = tmp_path / "empty", user_env(venv)
    empty.mkdir()
    version = sh(["infergate", "--version"], empty, env)
    assert version.stdout.split() == ["pytest-infergate", wheel.name.split("-")[1]], version
    made = sh(["infergate", "plan", "init", "-o", "plan.yaml"], empty, env)
    assert made.returncode == 0, made.stderr
    check = ["infergate", "plan", "check", "--plan=plan.yaml", "--ssh-user-config=none"]
    unfilled = sh(check, empty, env)
    assert unfilled.returncode == 4, unfilled.stdout + unfilled.stderr
    example = yaml.safe_load((empty / "plan.yaml").read_text())
    left = [line for line in unfilled.stderr.splitlines() if "TODO left" in line]
    assert len(left) == len(todos(example)) > 10, unfilled.stderr  # all at once
    (empty / "plan.yaml").write_text(yaml.safe_dump(filled(example)))
    fixed = sh(check, empty, env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    # no plan: the model the server lists; its load sweep (the defaults: minutes on CPU) aside
    smoke = ["infergate", "smoke", f"--endpoint={server}/v1", "-k", "not test_performance"]
    smoked = run_installed(venv, empty, smoke)
    assert smoked.red() == set(), smoked.output
    assert "inventory: none: --endpoint alone" in smoked.output
    passed = [t for t, o in smoked.outcomes.items() if o.status == "passed"]
    assert len(passed) > 10, smoked.output
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "test_theirs.py").write_text("def test_plain():\n    assert True\n")
    plain = sh(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"], theirs, env)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    added = sh(["pip", "install", "-q", "pytest-ansible"], theirs, env)
    assert added.returncode == 0, added.stderr
    # their pytest-ansible run: its --inventory, a real ping through Ansible's local connection
    python = venv / "bin" / "python"
    (theirs / "hosts.ini").write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={python}\n"
    )
    (theirs / "test_ping.py").write_text(
        "def test_ping(ansible_module):\n"
        "    assert ansible_module.ping()['localhost']['ping'] == 'pong'\n"
    )
    ansible = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    ansible += ["-p", "no:pytest11.testinfra", "--inventory=hosts.ini", "--host-pattern=localhost"]
    pinged = sh(ansible, theirs, env)
    assert pinged.returncode == 0, pinged.stdout + pinged.stderr
    assert "2 passed" in pinged.stdout, pinged.stdout
    # and ours beside it: --plan, with testinfra's plugin left out by the command itself
    shutil.copy(LAB_PLAN, empty / "lab.yaml")
    listed = sh(["infergate", "preflight", "--plan=lab.yaml", "--collect-only", "-q"], empty, env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "test_host.py::test_ssh_reachable_facts_gathered[node1]" in listed.stdout
    helped = sh(["infergate", "preflight", "-h"], empty, env)
    assert "--plan" in helped.stdout, helped.stdout
    assert "--endpoint" in helped.stdout, helped.stdout
