"""The `infergate` command: the pytest command line of each phase, the exit status pytest
gives it, and the plan subcommands (no cluster needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infergate.cli import main, pytest_argv

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "inventories" / "lab.yaml"
HOSTILE = ROOT / "selftest" / "data" / "plans-hostile"
EXPECTED = yaml.safe_load((HOSTILE / "expected.yaml").read_text())
PYTEST = [sys.executable, "-m", "pytest", "--pyargs"]


@pytest.fixture(autouse=True)
def no_plan_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERGATE_INVENTORY", raising=False)


def infergate(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infergate.cli", *argv],
        cwd=cwd,
        timeout=120,
        capture_output=True,
        text=True,
        check=False,
    )


def test_each_phase_runs_its_suites_with_its_marker() -> None:
    rest = ["-k", "not slow", "-x"]
    assert pytest_argv("preflight", "p.yaml", rest) == [
        *PYTEST,
        "infergate.tests_preflight",
        "-m",
        "preflight",
        "--inventory=p.yaml",
        *rest,
    ]
    assert pytest_argv("deploy", None, []) == [
        *PYTEST,
        "infergate.tests_deploy",
        "infergate.tests_inference",
        "-m",
        "deploy or inference",
    ]
    assert pytest_argv("smoke", None, []) == [
        *PYTEST,
        "infergate.tests_inference",
        "-m",
        "inference",
    ]


def test_a_phase_becomes_pytest_from_any_folder(tmp_path: Path) -> None:
    """The plan given as two words, outside the folder: the command passes it as one."""
    run = infergate(
        "preflight",
        "--inventory",
        str(LAB),
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "test_host.py::test_ssh_reachable_facts_gathered[node1]" in run.stdout


def test_a_phase_that_collects_nothing_exits_5(tmp_path: Path) -> None:
    run = infergate(
        "smoke",
        f"--inventory={LAB}",
        "-k",
        "no_such_test",
        "--collect-only",
        "-p",
        "no:cacheprovider",
        cwd=tmp_path,
    )
    assert run.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, run.stdout + run.stderr


def test_a_phase_without_a_plan_exits_4_saying_how_to_give_one(tmp_path: Path) -> None:
    run = infergate("preflight", "--collect-only", "-p", "no:cacheprovider", cwd=tmp_path)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "no plan: give the deployment plan (YAML) as --inventory=PATH" in run.stderr


def test_plan_check_prints_the_plan_and_its_grants(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "check", "--inventory", str(LAB)]) == 0
    assert capsys.readouterr().out == (
        f"{LAB}: lab (vllm, 2 nodes: node1 (10.251.0.11), node2 (10.251.0.12))\n"
        "privileged: the plan asks for nothing beyond the gate's own (host network and IPC, "
        "the GPUs and HCAs, the model read-only)\n"
    )


def test_plan_check_reads_the_plan_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFERGATE_INVENTORY", str(LAB))
    assert main(["plan", "check"]) == 0
    assert capsys.readouterr().out.startswith(f"{LAB}: lab (")


@pytest.mark.parametrize("name", ["dup-engine-block", "empty-file", "image-ref-option"])
def test_plan_check_of_a_bad_plan_exits_4_naming_the_key(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = HOSTILE / f"{name}.yaml"
    line = f", line {EXPECTED[name]['line']}" if EXPECTED[name]["line"] else ""
    assert main(["plan", "check", "--inventory", str(path)]) == 4
    assert capsys.readouterr().err == f"--inventory {path}{line}: {EXPECTED[name]['says']}\n"


def test_plan_check_without_a_plan_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["plan", "check"])
    assert exited.value.code == 4
    assert "no plan: give --inventory PATH or set INFERGATE_INVENTORY=PATH" in (
        capsys.readouterr().err
    )


def test_an_unknown_command_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["launch"])
    assert exited.value.code == 4


def test_down_refuses_a_bad_plan_as_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`infergate down` loads the plan as the gate does: a bad one is a usage error."""
    path = HOSTILE / "dup-engine-block.yaml"
    assert main(["down", "--run", "r1", "--inventory", str(path)]) == 4
    assert f"--inventory {path}, line 26: engine: duplicate key" in capsys.readouterr().err


def test_down_wants_a_run_or_all_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["down", "--inventory", str(LAB)])
    assert exited.value.code == 4
    assert "one of the arguments --run --all-runs is required" in capsys.readouterr().err


def test_plan_schema_prints_the_schema_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "nodes" in schema["properties"]


def test_plan_from_ansible_prints_or_writes_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Ansible sample's hosts become the plan's nodes: on stdout, or in the file -o names;
    --group narrows them, and a group the inventory lacks is a usage error naming it."""
    sample = ROOT / "selftest" / "data" / "ansible" / "ini" / "sparks.ini"
    assert main(["plan", "from-ansible", str(sample)]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert [n["name"] for n in printed["nodes"]] == ["spark-01", "spark-02", "grafana"]
    out = tmp_path / "plan.yaml"
    assert main(["plan", "from-ansible", str(sample), "--group", "sparks", "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["nodes"] == printed["nodes"][:2]
    assert main(["plan", "from-ansible", str(sample), "--group", "no-such-group"]) == 4
    assert "no-such-group" in capsys.readouterr().err
