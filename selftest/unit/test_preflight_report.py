"""The preflight report: a real preflight run (the plan's two nodes are this machine, reached
through testinfra's local backend) writes preflight.json and preflight.html, in one process
and under xdist, with a red cell for each failed check, no secret of the plan, and JSON in
JUnit's properties; the page renders in a real browser."""

from __future__ import annotations

import json
import re
import socket
import stat
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.checks.parity import engine_env_rows, shown
from infergate.fixtures.report import fail_on_nodes
from infergate.plan.apikey import HIDDEN
from infergate.plan.model import parse_inventory
from infergate.problems import Problem
from infergate.reports.files import write_preflight
from infergate.reports.preflight import Cell, Memory, Meta, ModelHash, NodeReport, Preflight
from infergate.reports.preflight_html import render_html
from infergate.reports.preflight_json import SCHEMA_VERSION, read_preflight
from infergate.reports.preflight_seen import CheckSeen, cells
from infergate.reports.version import ToolVersion
from selftest.browser import check_page
from selftest.suite import LOCKS_LOCALHOST, PROJECT_CONFIG, ROOT, run_folder_in

TOKEN = "hf_preflight_token_41c9e2"
KEY = "sk-preflight-engine-key-77a0"
SENT = "sk-preflight-sent-3b51"
MEMORY_CHECK = "test_memory.py::test_memory_available_for_plan"
BALANCE_CHECK = "test_memory.py::test_memory_balanced_across_nodes"
LEAK_CHECK = "test_leak_plan.py::test_a_problem_names_the_token"

# Two nodes that are this machine, a plan that needs more memory than any machine has (a
# red cell on each), and secrets: HF_TOKEN, the engine's key, and the key sent
PLAN = {
    "name": "tiny",
    "nodes": [
        {
            "name": "n1",
            "address": "localhost",
            "roles": ["head"],
            "ssh": {"connection": "local"},
            "fabric": {"address": "127.0.0.1/8"},
        },
        {
            "name": "n2",
            "address": "127.0.0.1",
            "roles": ["worker"],
            "ssh": {"connection": "local"},
            "fabric": {"address": "127.0.0.2/8"},
        },
    ],
    "fabric": {"interface": "lo", "subnet": "127.0.0.0/8"},
    "image": {"ref": "none-on-this-host"},
    "model": {"path": "/tmp/no-model", "served_name": "none"},
    "engine": {
        "kind": "vllm",
        "tensor_parallel": 1,
        "pipeline_parallel": 2,
        "dist_init_addr": "127.0.0.1",
        "dist_init_port": 29521,
        "api_port": 8021,
        "flags": ["--api-key", KEY],
        "env": {"HF_TOKEN": TOKEN},
    },
    "thresholds": {"min_mem_available_gib": 60000},
}

# A check that fails on a Problem naming the token, and records it in the parity table: as a
# broken judge might
LEAKY = """
import pytest
from infergate.fixtures.report import fail_on, record
from infergate.problems import Problem
from infergate.reports.protocol import PARITY

pytestmark = pytest.mark.preflight


def test_a_problem_names_the_token(node, inventory, request):
    token = inventory.engine.env["HF_TOKEN"]
    record(request.node, None, PARITY, {"env HF_TOKEN": {n.name: token for n in inventory.nodes}})
    fail_on(node, [Problem(f"HF_TOKEN={token}", "a token", f"export HF_TOKEN={token}")])
"""


@dataclass(frozen=True)
class Run:
    report: Preflight
    json_path: Path
    html_path: Path
    junit: Path
    output: str


def run_preflight(pytester: pytest.Pytester, *args: str, plan_doc: dict[str, Any] = PLAN) -> Run:
    """The memory checks, the leaky check and the summary row's probe (and ARGS' tests), on
    the tiny plan."""
    plan = pytester.path / "plan.yaml"
    plan.write_text(yaml.safe_dump(plan_doc))
    leaky = pytester.makepyfile(test_leak_plan=LEAKY)
    junit, out = pytester.path / "junit.xml", pytester.path / "reports"
    result = pytester.runpytest_subprocess(
        *PROJECT_CONFIG,
        f"--inventory={plan}",
        f"--junitxml={junit}",
        f"--report-dir={out}",
        "--api-key",
        SENT,
        *args,
        str(ROOT / "tests_preflight" / "test_memory.py"),
        str(leaky),
    )
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    folder = run_folder_in(out)
    json_path, html_path = folder / "preflight.json", folder / "preflight.html"
    assert f"preflight report: {html_path} (results: {json_path})" in output, output
    return Run(read_preflight(json_path), json_path, html_path, junit, output)


@LOCKS_LOCALHOST
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_preflight_run_writes_its_report(pytester: pytest.Pytester, workers: list[str]) -> None:
    run = run_preflight(pytester, *workers)
    assert [n.node for n in run.report.nodes] == ["n1", "n2"]
    for node in run.report.nodes:
        seen = {c.check: c for c in node.checks}
        assert set(seen) == {MEMORY_CHECK, BALANCE_CHECK, LEAK_CHECK}
        assert seen[MEMORY_CHECK].outcome == "failed"
        assert "at least 60000.0 GiB" in seen[MEMORY_CHECK].problems[0].planned
        assert seen[BALANCE_CHECK].outcome == "passed"
        assert seen[BALANCE_CHECK].cluster
        assert node.memory is not None
        assert node.memory.needed_gib == 60000
        assert 0 < node.memory.usable <= node.memory.total
        assert node.summary["node"] == node.node  # the summary row came too
    assert run.report.meta.inventory == "tiny"
    assert run.report.parity == {"env HF_TOKEN": {"n1": HIDDEN, "n2": HIDDEN}}
    assert "infergate: per-node summary" in run.output  # the terminal's table still reads them


@LOCKS_LOCALHOST
def test_each_nodes_model_hash_figures_reach_the_report(pytester: pytest.Pytester) -> None:
    """A full hash of a two-file model on both nodes: each node's files, bytes and cache hits
    in preflight.json, and a row a node on the page."""
    model = pytester.path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"w" * 300_000)
    plan = {**PLAN, "model": {"path": str(model), "served_name": "tiny"}}
    check = str(ROOT / "tests_preflight/test_model.py::test_model_content_identical_on_every_node")
    run = run_preflight(pytester, "--model-hash=full", check, plan_doc=plan)
    for node in run.report.nodes:
        assert node.model_hash is not None, node.node
        assert node.model_hash.files == node.model_hash.hashed == 2
        assert node.model_hash.hashed_bytes == 300_002
        assert node.model_hash.cache_hits == 0
    page = run.html_path.read_text()
    assert page.count("<td>2</td><td>2</td><td>0</td><td>0.00</td>") == 2, page


CONTENT = "test_model_content_identical_on_every_node"


@LOCKS_LOCALHOST
def test_a_node_whose_hash_fails_is_named_with_the_files_own_error(
    pytester: pytest.Pytester,
) -> None:
    """A socket left in the model directory cannot be opened (ENXIO, root or not): the
    content check fails naming each node and the file, not with a traceback, and no node
    gets hash figures."""
    with tempfile.TemporaryDirectory(prefix="ig-") as short:  # a socket's path: 107 bytes
        model = Path(short)
        (model / "config.json").write_text("{}")
        with socket.socket(socket.AF_UNIX) as left:
            left.bind(str(model / "model.safetensors"))
            plan = {**PLAN, "model": {"path": str(model), "served_name": "tiny"}}
            check = str(ROOT / "tests_preflight/test_model.py")
            run = run_preflight(pytester, "--model-hash=full", f"{check}::{CONTENT}", plan_doc=plan)
    content = next(c for c in run.report.nodes[0].checks if c.check.endswith(CONTENT))
    assert content.outcome == "failed", content
    assert "Traceback" not in run.output, run.output
    assert "IndexError" not in run.output, run.output
    for where in ("n1 (localhost)", "n2 (127.0.0.1)"):
        said = f"{where}: hashing every file of {model} failed: OSError: [Errno 6]"
        assert said in run.output, run.output
    assert f"{model}/model.safetensors" in run.output, run.output
    assert "`ls -l` it" in run.output, run.output
    assert [n.model_hash for n in run.report.nodes] == [None, None]


@LOCKS_LOCALHOST
def test_no_secret_reaches_the_report_or_junit(pytester: pytest.Pytester) -> None:
    run = run_preflight(pytester, "-n", "2")
    files = {p.name: p.read_text() for p in (run.json_path, run.html_path, run.junit)}
    assert [
        (name, s) for name, text in files.items() for s in (TOKEN, KEY, SENT) if s in text
    ] == []
    leak = next(c for c in run.report.nodes[0].checks if c.check == LEAK_CHECK)
    assert leak.problems == (Problem(f"HF_TOKEN={HIDDEN}", "a token", f"export HF_TOKEN={HIDDEN}"),)
    assert {stat.S_IMODE(p.stat().st_mode) for p in (run.json_path, run.html_path)} == {0o600}


@LOCKS_LOCALHOST
def test_junit_properties_are_json_under_versioned_names(pytester: pytest.Pytester) -> None:
    run = run_preflight(pytester)
    properties = [
        (p.get("name", ""), p.get("value", ""))
        for p in ET.parse(run.junit).getroot().iter("property")
    ]
    names = {name for name, _ in properties}
    assert {
        "infergate.check.v2",
        "infergate.problems.v2",
        "infergate.node_summary.v1",
        "infergate.node_memory.v1",
        "infergate.parity.v1",
    } <= names
    rows = [json.loads(v) for n, v in properties if n == "infergate.node_summary.v1"]
    assert {row["node"] for row in rows} == {"n1", "n2"}


@LOCKS_LOCALHOST
def test_the_page_renders_in_a_browser_with_red_cells(pytester: pytest.Pytester) -> None:
    run = run_preflight(pytester)
    seen = check_page(run.html_path, pytester.path / "preflight.png")
    assert seen.title == "infergate preflight: tiny"
    assert [alt for alt, _ in seen.images] == ["usable memory against the plan's need, per node"]
    assert seen.broken_images == []
    assert len(seen.tables) == 5  # the matrix, the parity table, the nodes, each node's details
    assert seen.empty_tables == []
    assert seen.screenshot.stat().st_size > 10_000  # a page, not a blank screen
    page = run.html_path.read_text()
    assert "<p class='verdict fail'>NOT READY" in page  # the verdict first
    red = page.split('<a class="st failed" href="#n')[1:]
    assert len(red) == 4  # two failed groups on two nodes, each linking to its details
    items = page.split("<div class=item>failed: ")[1:]
    assert sum("planned at least 60000.0 GiB" in item for item in items) == 2
    assert "<script" not in page
    assert "http" not in page  # self-contained: no external URL


def report() -> Preflight:
    problem = Problem("12.0 GiB usable", "at least 30.0 GiB", "stop what holds memory")
    checks = (
        Cell(MEMORY_CHECK, "failed", (problem,), "n1 (10.0.0.1): 1 problem(s)"),
        Cell(BALANCE_CHECK, "skipped", detail="one node", cluster=True),
    )
    memory = Memory(
        total=64 * 1024**3, available=13 * 1024**3, usable=12 * 1024**3, needed_gib=30.0
    )
    hashed = ModelHash(files=7, hashed=2, hashed_bytes=3 * 10**9, seconds=2.0, cache_hits=5)
    node = NodeReport("n1", "10.0.0.1", {"node": "n1", "driver": "580.95"}, memory, checks, hashed)
    meta = Meta("lab", "2026-12-01T10:00:00+0000", "run1", ToolVersion("infergate", "0.1.0", None))
    return Preflight(meta, (node,), {"kernel": {"n1": "6.1.0"}})


def test_the_json_reads_back_as_written(tmp_path: Path) -> None:
    json_path, _ = write_preflight(tmp_path / "run", report())
    assert json.loads(json_path.read_text())["schema_version"] == SCHEMA_VERSION
    assert read_preflight(json_path) == report()


def test_a_report_of_another_schema_is_refused_naming_both(tmp_path: Path) -> None:
    json_path, _ = write_preflight(tmp_path, report())
    data = json.loads(json_path.read_text())
    json_path.write_text(json.dumps({**data, "schema_version": 1}))  # before model_hash
    with pytest.raises(ValueError, match="schema_version 1, this infergate reads 3"):
        read_preflight(json_path)


def test_the_json_keeps_each_nodes_model_hash_under_its_key(tmp_path: Path) -> None:
    json_path, _ = write_preflight(tmp_path, report())
    (node,) = json.loads(json_path.read_text())["nodes"]
    assert node["model_hash"] == {
        "files": 7,
        "hashed": 2,
        "hashed_bytes": 3 * 10**9,
        "seconds": 2.0,
        "cache_hits": 5,
    }


def test_the_page_has_a_model_hash_row_a_node_only_where_one_was_hashed() -> None:
    page = render_html(report())
    assert "<h2>Model hash on each node</h2>" in page
    assert "<td>n1</td><td>7</td><td>2</td><td>5</td><td>3.00</td><td>2.0</td><td>1500</td>" in page
    unhashed = replace(report(), nodes=(replace(report().nodes[0], model_hash=None),))
    assert "Model hash" not in render_html(unhashed)


def test_a_failed_check_is_a_red_cell_with_its_remedy() -> None:
    page = render_html(report())
    red = page.split('<a class="st failed" href="#n0-g0">failed</a>')
    assert len(red) == 2  # the memory group, red on n1, linking to its details
    (item,) = page.split("<div class=item>failed: IG-MEMORY-SHORT ")[1:]
    assert "found 12.0 GiB usable; planned at least 30.0 GiB" in item
    assert "<code>stop what holds memory</code>" in item.split("</div>")[0]
    assert '<span id="n0-g0">memory</span>' in page
    assert "Not applicable: " in page  # folded into one line
    assert "(one node)" in page


def test_the_parity_table_shows_values_never_none_or_a_template() -> None:
    lab = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))
    env = engine_env_rows(lab)
    assert any("{fabric_ip}" in v for v in lab.engine.env.values())  # the plan's templates
    matrix = {**env, "docker": {"n1": shown(None), "n2": "27.0"}}
    page = render_html(replace(report(), parity=matrix))
    parity = page.split("<h2>Parity")[1].split("</table>")[0]
    assert "None" not in parity
    assert re.search(r"\{\w+\}", parity) is None, parity


@pytest.mark.parametrize(
    ("problems", "outcome", "expected"),
    [
        ({"n2": (Problem("a", "b", "c"),)}, "failed", {"n1": "passed", "n2": "failed"}),
        ({}, "failed", {"n1": "failed", "n2": "failed"}),
        ({}, "skipped", {"n1": "skipped", "n2": "skipped"}),
    ],
)
def test_a_check_of_the_nodes_together_has_a_cell_on_each(
    problems: dict[str, tuple[Problem, ...]], outcome: str, expected: dict[str, str]
) -> None:
    """Red where its problems name the node, or on every node when they name none."""
    test = CheckSeen(BALANCE_CHECK, None, outcome, problems, "detail")
    found = cells(test, ["n1", "n2"])
    assert {n: c.outcome for n, c in found.items()} == expected
    assert all(c.cluster for c in found.values())


def test_a_failure_carries_the_problems_of_the_nodes_that_have_some() -> None:
    """What the report reads of a cross-node failure: only the nodes with problems (a node
    with none is green in the grid)."""
    plan = parse_inventory(PLAN)
    problem = Problem("a", "b", "c")
    with pytest.raises(pytest.fail.Exception) as failed:
        fail_on_nodes(plan.nodes, {"n1": [], "n2": [problem]})
    assert failed.value.infergate_problems == {"n2": [asdict(problem)]}
