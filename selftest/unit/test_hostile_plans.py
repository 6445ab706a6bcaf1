"""Hostile and malformed plans: each is refused as a usage error that names the key and its
line, in well under 2 s, and never as a traceback (selftest/data/plans-hostile, one edit of
the lab plan each; expected.yaml holds what each must say)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from infergate.fixtures.inventory import load_inventory
from infergate.plan import loader as plan_yaml
from infergate.plan.model import InventoryError

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "selftest" / "data" / "plans-hostile"
EXPECTED: dict[str, dict[str, object]] = yaml.safe_load((CORPUS / "expected.yaml").read_text())
PLANS = sorted(p for p in CORPUS.glob("*.yaml") if p.name != "expected.yaml")


def refusal(path: Path) -> tuple[str, float]:
    """The message and the CPU seconds it cost: CPU time, so a busy machine cannot flake it."""
    started = time.process_time()
    with pytest.raises(pytest.UsageError) as refused:
        load_inventory(path)
    return str(refused.value), time.process_time() - started


def test_the_corpus_has_an_expectation_for_each_plan() -> None:
    assert len(PLANS) >= 40
    assert sorted(EXPECTED) == sorted(p.stem for p in PLANS)


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_hostile_plan_is_a_usage_error_naming_key_and_line(path: Path) -> None:
    expected = EXPECTED[path.stem]
    message, seconds = refusal(path)
    line = f", line {expected['line']}" if expected["line"] else ""
    assert message == f"--plan {path}{line}: {expected['says']}"
    assert seconds < 2


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_without_libyaml_the_same_plans_are_refused(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pure Python loader words YAML syntax errors its own way (and meets deep nesting
    as RecursionError), but refuses every plan too, as an InventoryError."""
    monkeypatch.setattr(plan_yaml, "_Loader", yaml.SafeLoader)
    started = time.process_time()
    with pytest.raises(InventoryError):
        plan_yaml.load_plan(path)
    assert time.process_time() - started < 10  # deep-flow costs this loader 2.6 s of recursion


def test_every_shipped_plan_loads_through_the_guarded_loader() -> None:
    for path in sorted((ROOT / "inventories").glob("*.yaml")):
        assert load_inventory(path).nodes


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null", "/proc/self"])
def test_a_path_that_is_no_regular_file_is_refused_unread(special: str) -> None:
    message, seconds = refusal(Path(special))
    assert message == f"--plan {special}: not a regular file; give the path of a plan's YAML file"
    assert seconds < 2


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)  # opening it to read would wait for a writer forever
    assert refusal(fifo)[0].endswith(": not a regular file; give the path of a plan's YAML file")


def test_a_plan_over_the_size_cap_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * plan_yaml.MAX_BYTES + "\n")
    assert refusal(big)[0] == f"--plan {big}: larger than 1024 KiB: not a plan"


def test_a_missing_plan_says_why() -> None:
    message, _ = refusal(Path("/nonexistent/plan.yaml"))
    assert message == "--plan /nonexistent/plan.yaml: cannot read: No such file or directory"


@pytest.mark.parametrize("case", ["alias-bomb", "alias-bomb-in-a-refused-value"])
def test_the_bomb_is_refused_fast_and_small(case: str) -> None:
    """A 1.3 KB file that cost the old parser 2.8 s and 370 MB (8 levels of aliases; a 9th
    multiplies that by 9: repr of the refused value walked every copy): refused in ms."""
    started = time.process_time()
    with pytest.raises(InventoryError, match="over 100000 values, aliases expanded"):
        plan_yaml.load_plan(CORPUS / f"{case}.yaml")
    assert time.process_time() - started < 0.5


def large_plan(count: int) -> str:
    """The lab plan with COUNT GPU nodes, each as a real cluster writes one (ssh, two HCAs)."""
    plan = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    plan["nodes"] = [
        {
            "name": f"gpu-{i:04d}",
            "address": f"10.0.{i // 250}.{i % 250 + 1}",
            "roles": ["head" if i == 0 else "worker"],
            "ssh": {"user": "ops", "key": "~/.ssh/id_ed25519"},
            "fabric": {"address": f"10.1.{i // 250}.{i % 250 + 1}/16", "hcas": ["mlx5_0"]},
            "gpus": 8,
        }
        for i in range(count)
    ]
    plan["fabric"]["subnet"] = "10.1.0.0/16"
    plan["engine"].update(dist_init_addr="10.1.0.1", tensor_parallel=8, pipeline_parallel=count)
    return yaml.safe_dump(plan, default_flow_style=None, sort_keys=False)


def test_a_plain_plan_of_2000_nodes_loads(tmp_path: Path) -> None:
    """2,000 nodes are 24,000 values and 330 KB: no bomb (refused at 10,000 values), and
    within the size cap (it was 256 KiB)."""
    path = tmp_path / "large.yaml"
    path.write_text(large_plan(2000))
    assert path.stat().st_size < plan_yaml.MAX_BYTES
    started = time.process_time()
    assert len(load_inventory(path).nodes) == 2000
    assert time.process_time() - started < 10


def _case(name: str) -> tuple[str, str]:
    expected = EXPECTED[name]
    return str(CORPUS / f"{name}.yaml"), f", line {expected['line']}: {expected['says']}"


@pytest.mark.parametrize(
    ("plan", "then"),
    [
        _case("dup-engine-block"),
        _case("alias-bomb"),
        _case("ssh-key-newline"),
        ("/dev/zero", ": not a regular file; give the path of a plan's YAML file"),
    ],
    ids=["dup-engine-block", "alias-bomb", "ssh-key-newline", "dev-zero"],
)
def test_pytest_stops_with_one_line_and_no_traceback(plan: str, then: str) -> None:
    """As an operator meets it: `pytest --plan=PLAN` exits 4 (usage error) at once."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        # one word: pytest reads a separate path outside the project as its rootdir
        [sys.executable, "-m", "pytest", f"--plan={plan}", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert done.returncode == 4, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.strip() == f"ERROR: --plan {plan}{then}"
    # CPU seconds, so a busy machine cannot flake it: pytest's start-up; the refusal is ms
    assert seconds < 10, seconds
