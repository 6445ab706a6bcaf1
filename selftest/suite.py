"""Run the real suite in a subprocess (pytester) and read what each test did from JUnit XML;
the plan a unit test runs it on, whose nodes no run can reach."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# pytester runs in a temporary directory, where pytest.ini's testpaths do not apply
PHASE_DIRS = [str(ROOT / d) for d in ("tests_preflight", "tests_deploy", "tests_inference")]
LAB_PLAN = ROOT / "inventories" / "lab.yaml"
# the project's pytest.ini and rootdir from any folder, with no cache written into the checkout
PROJECT_CONFIG = ("-c", str(ROOT / "pytest.ini"), "--rootdir", str(ROOT), "-p", "no:cacheprovider")
CLOSED_PORT = 9  # discard: no sshd listens there on a loopback address
# on the unit tests whose runs take or hold this machine's real cluster lock
# (/run/infergate-lock): under -n, one worker runs them, one at a time
LOCKS_LOCALHOST = pytest.mark.xdist_group("lock-on-localhost")


@dataclass(frozen=True)
class Outcome:
    status: str  # passed | failed | error | skipped
    message: str
    seconds: float


@dataclass(frozen=True)
class SuiteRun:
    outcomes: dict[str, Outcome]  # "test_fabric.py::test_x[node1]" -> outcome
    output: str

    def red(self) -> set[str]:
        return {t for t, o in self.outcomes.items() if o.status in ("failed", "error")}

    def message(self, test: str) -> str:
        return self.outcomes[test].message


def run_folder_in(root: Path) -> Path:
    """The one run's report folder a run made in ROOT (its --report-dir)."""
    [folder] = [p for p in root.iterdir() if p.is_dir()]
    return folder


def run_suite(pytester: pytest.Pytester, *args: str, inventory: Path | None = None) -> SuiteRun:
    """`pytest ARGS` from the project root's config, as an operator would run it; its
    reports go to the test's own folder unless ARGS name one (not into the checkout)."""
    junit = pytester.path / "junit.xml"
    inv = ["--inventory", str(inventory)] if inventory else []
    if not any(a.startswith("--report-dir") for a in args):
        inv += ["--report-dir", str(pytester.path / "reports")]
    result = pytester.runpytest_subprocess(
        *PROJECT_CONFIG,
        f"--junitxml={junit}",
        *inv,
        *args,
        *PHASE_DIRS,
    )
    return SuiteRun(read_junit(junit), result.stdout.str())


def suite_argv(folder: Path, plan: Path, *args: str) -> list[str]:
    """The suite's command line on PLAN, its JUnit XML and reports in FOLDER."""
    return [
        sys.executable,
        "-m",
        "pytest",
        *PROJECT_CONFIG,
        f"--junitxml={folder / 'junit.xml'}",
        f"--inventory={plan}",
        "--report-dir",
        str(folder / "report"),
        *args,
        *PHASE_DIRS,
    ]


class SuiteProcess:
    """The suite in a subprocess of its own, with its own report dir and output."""

    def __init__(self, pytester: pytest.Pytester, name: str, plan: Path, *args: str) -> None:
        self.dir = pytester.path / name
        self.dir.mkdir()
        self.junit, self.out = self.dir / "junit.xml", self.dir / "suite.out"
        argv = suite_argv(self.dir, plan, *args)
        with self.out.open("w") as out:
            self.proc = subprocess.Popen(argv, cwd=self.dir, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.out.read_text()

    def wait_for(self, pattern: str, timeout_s: float = 180) -> re.Match[str]:
        """A line of the deploy log or the output, matching PATTERN."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and self.proc.poll() is None:
            logs = (self.dir / "report").glob("*/deploy.log")
            text = self.output() + "".join(log.read_text() for log in logs)
            if found := re.search(pattern, text):
                return found
            time.sleep(0.2)
        raise AssertionError(f"never saw {pattern!r}:\n{self.output()[-3000:]}")

    def run_id(self) -> str:
        return self.wait_for(r"cluster lock on \S+ \(\S+\) taken by run (\S+)").group(1)

    def end(self, number: int, timeout_s: float = 120) -> float:
        """Send NUMBER, wait for the exit; seconds it took."""
        sent = time.monotonic()
        self.proc.send_signal(number)
        self.proc.wait(timeout=timeout_s)
        return time.monotonic() - sent


def closed_plan(folder: Path, data: dict[str, Any] | None = None) -> Path:
    """DATA (by default the lab's plan) with node K at 127.0.0.K, its SSH port closed, as
    FOLDER/closed-plan.yaml: a run on it reaches no node and no lab, lab up or not."""
    plan = data if data is not None else yaml.safe_load(LAB_PLAN.read_text())
    for number, node in enumerate(plan["nodes"], 1):
        node["address"] = f"127.0.0.{number}"
        node["ssh"] = {**node.get("ssh", {}), "port": CLOSED_PORT}
    path = folder / "closed-plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def read_junit(path: Path) -> dict[str, Outcome]:
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        test = case.get("name", "")
        if test.rfind("@") > test.rfind("]"):  # xdist's loadgroup tags a test: x[node1]@node1
            test = test[: test.rfind("@")]
        name = f"{module}.py::{test}"
        status, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                status = "failed" if tag == "failure" else tag
                message = (found.get("message") or "") + "\n" + (found.text or "")
        outcomes[name] = Outcome(status, message, float(case.get("time", "0")))
    return outcomes
