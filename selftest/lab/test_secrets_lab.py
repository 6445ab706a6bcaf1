"""The healthy launch in the lab (its TP 2 plan, a foreign container beside it, under the
5 s backstop: test_deploy_lab's facts) with the plan's secrets: HF_TOKEN (and a variable
the plan marks, and a node's own password) in the env, an API key in engine.flags, which the
suite sends. The engine gets them (the launch passes tests_deploy and a short inference only
if vLLM serves with the key), yet none shows anywhere: not in `ps` on either node or on the
controller, sampled through the launch; not in the terminal output of a run at -vvv with
--showlocals and live DEBUG logs, where one test errors on purpose printing the plan and the
endpoint; not in the JUnit file; not in any file of the report directory (deploy.log,
evidence, results.json, report.html), which is this user's alone (directories 0700, files
0600)."""

from __future__ import annotations

import stat
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from infergate.plan.apikey import HIDDEN
from infergate.reports.inference_json import read_results
from infergate_lab import Lab
from selftest.lab.test_deploy_lab import (
    BACKSTOP,
    NODES,
    plan_file,
    served_and_left_only_what_it_found,
    short_sweep,
    suite_args,
)
from selftest.suite import run_folder_in, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

TOKEN = "hf_lab_token_8d41c7e2a9"
KEY = "sk-lab-engine-key-3f9b0d6e"
MARKED = "lab-marked-credential-71c2"
NODE_PASS = "node2-password-e5a0b3"
SECRETS = (TOKEN, KEY, MARKED, NODE_PASS)
GREEN_FLOOR_GIB = 0.5  # far below what a lab node keeps while serving (docs/memory-guard.md)
PS = ["ps", "-ww", "-eo", "args"]
ERRS = "test_errors_on_purpose.py::test_errors_on_purpose"
SERVED_WITH_THE_KEY = {
    "test_deploy.py::test_endpoint_answers_with_the_planned_model",
    "test_conformance.py::test_openai_client_works_end_to_end",
    "test_performance.py::test_every_request_completes[c=1]",
}

# In a directory named tests_inference (its outcome goes into results.json) with a
# conftest.py of its own (which stopped pytest with INTERNALERROR beside the report plugin)
ON_PURPOSE = '''
import pytest


@pytest.fixture
def broken(endpoint, inventory):
    """Shows the plan and the endpoint, reprs and values, as a careless fixture might."""
    engine = inventory.engine
    raise RuntimeError(f"on purpose: {endpoint!r} key={endpoint.api_key} env={dict(engine.env)} "
                       f"flags={engine.flags} node2={dict(inventory.nodes[1].env)} {inventory!r}")


@pytest.mark.inference
def test_errors_on_purpose(broken):
    pass
'''


def secret_plan(plan: dict) -> None:
    engine = plan["engine"]
    engine["flags"] += ["--api-key", KEY]
    engine["env"].update(HF_TOKEN=TOKEN, LAB_CREDENTIAL=MARKED)
    engine["secret_env"] = ["LAB_CREDENTIAL"]
    plan["nodes"][1]["env"] = {"DB_PASSWORD": NODE_PASS}
    short_sweep(plan)
    # the memory guard rides along (test_memguard_lab's green side): its curves in the report
    plan["guard"] = {"memory": "on", "memory_floor_gib": GREEN_FLOOR_GIB}


@contextmanager
def sampling_ps(lab: Lab) -> Iterator[list[str]]:
    """`ps -ww -eo args` on both nodes and on the controller, every 0.5 s while the block
    runs: every argv of the ssh sessions, the docker CLIs and the engines."""
    samples: list[str] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            for node in NODES:
                samples.append(
                    lab.node_exec(node, ["ps", "-ww", "-eo", "args"], check=False).stdout
                )
            here = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True)
            samples.append(here.stdout)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        done.set()
        thread.join(10)


def hits(texts: dict[str, str]) -> list[tuple[str, str]]:
    return [(where, s) for where, text in texts.items() for s in SECRETS if s in text]


@pytest.mark.usefixtures("no_key_in_the_environment")  # the key sent is the plan's
def test_healthy_launch_serves_with_secrets_shown_nowhere(engine_lab, pytester, tmp_path):
    engine_lab.apply_fault("foreign-container", "node1", "0.2")
    plan = plan_file(tmp_path, secret_plan)
    folder = pytester.mkdir("tests_inference")
    (folder / "conftest.py").write_text("")
    (folder / "test_errors_on_purpose.py").write_text(ON_PURPOSE)
    args = suite_args(
        pytester,
        "-m",
        "deploy or inference",
        *BACKSTOP,
        "-vvv",
        "--showlocals",
        "--log-level=DEBUG",
        "-o",
        "log_cli=true",
        str(folder),
    )
    with sampling_ps(engine_lab) as samples:
        run = run_suite(pytester, *args, inventory=plan)
    assert "INTERNALERROR" not in run.output, run.output
    assert run.red() == {ERRS}, run.output
    assert run.outcomes[ERRS].status == "error"
    passed = {t for t, o in run.outcomes.items() if o.status == "passed"}
    assert passed >= SERVED_WITH_THE_KEY, run.output
    assert HIDDEN in run.message(ERRS)
    assert "live log" in run.output
    served_and_left_only_what_it_found(run, pytester, engine_lab)

    ps = "\n".join(samples)
    assert "vllm serve" in ps, "the samples missed the engine's life"
    report = run_folder_in(pytester.path / "report")
    log = (report / "deploy.log").read_text()
    assert "sending the API key from engine.flags --api-key" in log, log
    files = [p for p in report.rglob("*") if p.is_file()]
    texts = {str(p): p.read_bytes().decode(errors="replace") for p in files}
    texts |= {"terminal": run.output, "junit": (pytester.path / "junit.xml").read_text(), "ps": ps}
    assert hits(texts) == []
    assert "results.json" in {p.name for p in files}
    # the engines got them: in their env, which docker inspect shows (hidden in the evidence)
    inspect = (report / "evidence" / "node1" / "inspect.json").read_text()
    assert f"VLLM_API_KEY={HIDDEN}" in inspect
    assert f"HF_TOKEN={HIDDEN}" in inspect
    assert "--api-key" not in inspect
    assert f"DB_PASSWORD={HIDDEN}" in (report / "evidence" / "node2" / "inspect.json").read_text()

    guarded_the_whole_run(report)

    modes = {str(p): stat.S_IMODE(p.stat().st_mode) for p in [report, *report.rglob("*")]}
    assert {p: m for p, m in modes.items() if m != (0o700 if Path(p).is_dir() else 0o600)} == {}


def guarded_the_whole_run(report: Path) -> None:
    """Both nodes sampled through the launch and the load, above the floor, and drawn."""
    curves = read_results(report / "results.json").memory
    assert [c.where for c in curves] == ["node1 (10.251.0.11)", "node2 (10.251.0.12)"]
    for c in curves:
        assert c.enforced
        assert len(c.t_s) >= 20, c  # a tick a second through a launch of 20 s and more
        assert GREEN_FLOOR_GIB < min(c.available_gib) < 6, c  # bounded by the node's 6 GiB
        print(f"{c.where}: {len(c.t_s)} samples, lowest {min(c.available_gib):.2f} GiB")
    page = (report / "report.html").read_text()
    assert "Memory during the launch and the load" in page
