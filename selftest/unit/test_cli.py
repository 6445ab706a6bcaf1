"""The `infergate` command: the pytest command line of each phase, the exit status pytest
gives it, and the plan subcommands (no cluster needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from argparse import ArgumentTypeError
from importlib import metadata
from pathlib import Path
from typing import NoReturn

import pytest
import yaml

from infergate import cli
from infergate.cli import main, pytest_argv
from infergate.inference.endpoint import endpoint_base
from infergate.options import SUITE_OPTIONS
from selftest.suite import closed_plan

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "inventories" / "lab.yaml"
HOSTILE = ROOT / "selftest" / "data" / "plans-hostile"
EXPECTED = yaml.safe_load((HOSTILE / "expected.yaml").read_text())
PYTEST = [sys.executable, "-m", "pytest", "--pyargs"]
RUN = "20261201-030512-5f0c2a9e41b7d3c8"


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
    assert pytest_argv("preflight", ["--plan=p.yaml"], rest) == [
        *PYTEST,
        "infergate.tests_preflight",
        "-m",
        "preflight",
        "--plan=p.yaml",
        *rest,
    ]
    assert pytest_argv("deploy", [], []) == [
        *PYTEST,
        "infergate.tests_deploy",
        "infergate.tests_inference",
        "-m",
        "deploy or inference",
    ]
    assert pytest_argv("smoke", [], []) == [
        *PYTEST,
        "infergate.tests_inference",
        "-m",
        "inference",
    ]


def test_a_phase_becomes_pytest_from_any_folder(tmp_path: Path) -> None:
    """The plan given as two words, by its old name, outside the folder: the command passes
    it as one, --plan=PATH; --level as two words reaches pytest too (it deselects)."""
    run = infergate(
        "preflight",
        "--inventory",
        str(LAB),
        "--level",
        "quick",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "test_host.py::test_ssh_reachable_facts_gathered[node1]" in run.stdout
    assert "deselected" in run.stdout


class Execed(Exception):
    """os.execv's stand-in: the command a phase would have become."""


@pytest.fixture
def execed(monkeypatch: pytest.MonkeyPatch) -> None:
    def execv(path: str, argv: list[str]) -> NoReturn:
        raise Execed(argv)

    monkeypatch.setattr(cli.os, "execv", execv)


@pytest.mark.usefixtures("execed")
def test_a_phase_passes_each_suite_option_on_as_one_word() -> None:
    """With `=` or as two words, by name or alias: each reaches pytest as NAME=VALUE, in the
    order given; pytest's own arguments follow as they came."""
    given = ["--level", "quick", "--endpoint", "http://head:8000", "--api-key=a=b"]
    given += ["--keep-deployment", "--inventory", "p.yaml", "-k", "not slow", "--lock-wait=5"]
    with pytest.raises(Execed) as became:
        main(["smoke", *given])
    (argv,) = became.value.args
    assert argv[argv.index("inference") + 1 :] == [
        "--level=quick",
        "--endpoint=http://head:8000",
        "--api-key=a=b",
        "--keep-deployment",
        "--plan=p.yaml",
        "--lock-wait=5",
        "-k",
        "not slow",
    ]


@pytest.mark.usefixtures("execed")
@pytest.mark.parametrize("phase", ["preflight", "deploy", "smoke"])
def test_each_phase_help_lists_every_suite_option_without_a_plan(
    phase: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each option of the suite with its help, from the command alone: no plan, no pytest."""
    monkeypatch.setenv("COLUMNS", "1000")  # no help wrapped, so none broken at a hyphen
    with pytest.raises(SystemExit) as exited:
        main([phase, "-h"])
    assert exited.value.code == 0
    said = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert said.startswith(f"usage: infergate {phase} ")
    assert "--endpoint-wait SECONDS how long the inference phase waits" in said
    for option in SUITE_OPTIONS:
        assert option.name in said
        assert " ".join(option.help.split()) in said


def test_down_help_lists_run_and_all_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["down", "-h"])
    assert exited.value.code == 0
    said = capsys.readouterr().out
    assert "(--run ID | --all-runs)" in said
    assert "--all-runs            every run but a live one" in said


def test_version_is_the_installed_distribution_s() -> None:
    """The distribution named in pyproject.toml, whatever that name is, and its version."""
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    done = subprocess.run(
        [sys.executable, "-m", "infergate.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{name} {metadata.version(name)}\n"


def test_a_phase_that_collects_nothing_exits_5(tmp_path: Path) -> None:
    run = infergate(
        "smoke",
        f"--plan={LAB}",
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
    assert "no plan: give the deployment plan (YAML) as --plan=PATH" in run.stderr


def test_plan_check_prints_the_plan_and_its_grants(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "check", "--plan", str(LAB)]) == 0
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
    assert main(["plan", "check", "--plan", str(path)]) == 4
    assert capsys.readouterr().err == f"--plan {path}{line}: {EXPECTED[name]['says']}\n"


def test_plan_check_without_a_plan_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["plan", "check"])
    assert exited.value.code == 4
    assert "no plan: give --plan PATH or set INFERGATE_INVENTORY=PATH" in (capsys.readouterr().err)


def test_an_unknown_command_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["launch"])
    assert exited.value.code == 4


def test_down_refuses_a_bad_plan_as_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`infergate down` loads the plan as the gate does: a bad one is a usage error."""
    path = HOSTILE / "dup-engine-block.yaml"
    assert main(["down", "--run", RUN, "--plan", str(path)]) == 4
    assert f"--plan {path}, line 26: engine: duplicate key" in capsys.readouterr().err


def test_down_wants_a_run_or_all_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["down", "--plan", str(LAB)])
    assert exited.value.code == 4
    assert "one of the arguments --run --all-runs is required" in capsys.readouterr().err


# each a usage error, never "no filter": `--run "$RUN_ID"` with the variable unset is the first
BAD_RUNS = {
    "empty": "",
    "blank": "   ",
    "newline": "\n",
    "label-injection": "x,label=y",
    "label-of-every-run": "infergate.run",
    "two-words": "a b",
    "glob": "*",
    "option-like": "--all-runs",
    "too-long": RUN + "0" * 5000,
    "id-and-more": RUN + "-x",
    "unicode-digits": "\uff12" * 8 + RUN[8:],  # fullwidth 2s: \\d would take them
    "upper-hex": RUN.upper(),
}


@pytest.mark.parametrize("value", BAD_RUNS.values(), ids=BAD_RUNS.keys())
def test_down_refuses_a_run_id_outside_the_grammar_naming_the_option(
    value: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # a plan that reaches no node: were the value taken, nothing could be removed
    with pytest.raises(SystemExit) as exited:
        main(["down", f"--run={value}", "--plan", str(closed_plan(tmp_path))])
    assert exited.value.code == 4
    err = capsys.readouterr().err
    assert "infergate down: error: argument --run: " in err
    assert "is not a run id (YYYYMMDD-HHMMSS then 16 hex digits" in err
    assert "every run's: --all-runs" in err
    assert len(err) < 600  # a 5,000-character value is cut, not echoed


def test_down_with_an_unset_run_variable_exits_4_before_any_node(tmp_path: Path) -> None:
    """The installed command, as a script runs it: `--run "$RUN_ID"` with RUN_ID unset
    removed every run's containers; now a usage error, no traceback, nothing reached."""
    done = infergate("down", "--run", "", "--plan", str(closed_plan(tmp_path)), cwd=tmp_path)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "argument --run: '' is not a run id" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stdout == ""


def test_down_takes_all_runs_only_alone() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["down", "--run", RUN, "--all-runs", "--plan", str(LAB)])
    assert exited.value.code == 4


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


BAD_ENDPOINTS = [
    "localhost:8000",
    "head:8000/v1",
    "ftp://head:8000",
    "http://",
    "http://head:99999",
    "http://head:port",
    "http://head:8000/v2/models",
    "http://head:8000?x=1",
    "ops:hunter2-secret@head:8000",
]


@pytest.mark.parametrize("url", BAD_ENDPOINTS)
def test_a_bad_endpoint_is_refused_unquoted(url: str) -> None:
    with pytest.raises(ArgumentTypeError, match=r"^expected http\(s\)://HOST:PORT") as refused:
        endpoint_base(url)
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize("url", ["localhost:8000", "ops:hunter2-secret@head:8000"])
def test_a_bad_endpoint_is_a_usage_error_naming_the_option(url: str, tmp_path: Path) -> None:
    """--endpoint is read with the command line: exit 4 naming it, the URL unquoted (it may
    hold a password), not a traceback in the first inference test."""
    run = infergate("smoke", f"--plan={LAB}", f"--endpoint={url}", "--collect-only", cwd=tmp_path)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "error: argument --endpoint: expected http" in run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert "hunter2" not in run.stdout + run.stderr


def test_a_good_endpoint_is_its_base_url() -> None:
    assert endpoint_base("https://head:8000/v1/") == "https://head:8000"
    assert endpoint_base("http://[::1]:8000") == "http://[::1]:8000"
