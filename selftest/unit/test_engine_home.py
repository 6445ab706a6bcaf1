"""Engine knowledge has one home (STYLE.md rule 13): the registry holds one adapter for
exactly the plan's engine kinds, each adapter answers every question of `Engine`, and no
module outside infergate/engines/ compares the kind. The ports an adapter plans for each
node are the ports its launch commands give that node."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest
import yaml

from infergate.engines.engine import Engine
from infergate.engines.launch import Exec, Start
from infergate.engines.registry import ENGINES, engine_for
from infergate.inference.conformance import BAD_REQUESTS
from infergate.plan.model import ENGINE_KINDS, EngineKind, parse_inventory

ROOT = Path(__file__).resolve().parents[2]
KINDS = frozenset(get_args(EngineKind))
HOME = ROOT / "infergate" / "engines"
SCANNED = sorted(
    p
    for folder in ("infergate", "fixtures", *(d.name for d in ROOT.glob("tests_*")))
    for p in (ROOT / folder).rglob("*.py")
    if HOME not in p.parents
)


def test_the_registry_holds_one_adapter_for_exactly_the_plans_kinds() -> None:
    assert set(ENGINES) == KINDS == set(ENGINE_KINDS)
    assert all(engine.kind == kind for kind, engine in ENGINES.items())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_adapter_answers_every_question(kind: EngineKind) -> None:
    engine = engine_for(kind)
    for name in Engine.__annotations__:
        getattr(engine, name)  # an adapter that leaves a fact unset raises here
    assert set(engine.answers_by_design) <= {d.name for d in BAD_REQUESTS}


def _is_kind(node: ast.AST) -> bool:
    """An attribute named `kind`, an engine kind's literal, or a collection holding one."""
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Constant):
        return node.value in KINDS
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(map(_is_kind, node.elts))


def _branches(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        return any(map(_is_kind, (node.left, *node.comparators)))
    if isinstance(node, ast.Subscript):  # a table looked up by the kind
        return isinstance(node.slice, ast.Attribute) and node.slice.attr == "kind"
    if isinstance(node, ast.Dict):  # a table keyed by kinds
        return any(k is not None and _is_kind(k) for k in node.keys)
    if isinstance(node, ast.Match):
        return _is_kind(node.subject)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return _calls_on_kind(node.func.value, node.func.attr, node.args)
    return False


def _calls_on_kind(receiver: ast.expr, method: str, args: list[ast.expr]) -> bool:
    """`kind.startswith("vllm")`, and a table's `.get(inventory.engine.kind)`."""
    if method in ("startswith", "endswith"):
        named = isinstance(receiver, ast.Name) and receiver.id == "kind"
        return named or _is_kind(receiver) or any(map(_is_kind, args))
    return (
        method == "get"
        and bool(args)
        and isinstance(args[0], ast.Attribute)
        and (args[0].attr == "kind")
    )


def kind_branches(source: str) -> list[str]:
    """Each place SOURCE branches on the engine kind, as `LINE: code`."""
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.expr | ast.Match) and _branches(node)
    ]


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_outside_the_engines_branches_on_the_kind(path: Path) -> None:
    assert kind_branches(path.read_text()) == []


@pytest.mark.parametrize(
    "source",
    [
        'if inventory.engine.kind == "sglang":\n    pass',
        'needed = "SGLANG_HOST_IP" if kind == "sglang" else "VLLM_HOST_IP"',
        "ray = e.kind != rendezvous",
        'if kind in ("vllm", "vllm-ray"):\n    pass',
        'parser = vllm_parser() if kind.startswith("vllm") else sglang_parser()',
        'imported = name.startswith("vllm")',
        "env = ENGINE_ENV[inventory.engine.kind]",
        "env = ENGINE_ENV.get(inventory.engine.kind, {})",
        'ENGINE_ENV = {"vllm-ray": {"RAY_memory_monitor_refresh_ms": "0"}}',
        'match inventory.engine.kind:\n    case "sglang":\n        pass',
    ],
)
def test_a_branch_on_the_kind_is_caught(source: str) -> None:
    assert kind_branches(source), source


@pytest.mark.parametrize(
    "source",
    [
        'said = f"{inventory.name} ({inventory.engine.kind})"',
        "needed = engine_for(inventory).host_ip_var",
        'if kind == "counters":\n    pass',  # a word of another parser's, no engine kind
        'IN_IMAGE = ("vllm", "sglang", "torch")',
    ],
)
def test_what_is_no_branch_passes(source: str) -> None:
    assert kind_branches(source) == []


# --- the ports an adapter plans are the ports its launch gives each node ------------------


def _plans() -> list[Path]:
    return sorted((ROOT / "inventories").glob("*.yaml"))


def _argv(launch_steps: tuple[object, ...], node: str) -> list[str]:
    """Every word the launch runs on NODE: its container's command and what runs in it."""
    words: list[str] = []
    for step in launch_steps:
        if isinstance(step, Start) and step.node == node:
            words += step.command
        elif isinstance(step, Exec) and step.node == node:
            words += step.argv
    return words


@pytest.mark.parametrize("path", _plans(), ids=lambda p: p.stem)
def test_planned_ports_are_the_ports_the_launch_commands_give(path: Path) -> None:
    inventory = parse_inventory(yaml.safe_load(path.read_text()))
    engine, e = engine_for(inventory), inventory.engine
    steps = engine.plan_launch(inventory, "run1").steps
    for node in inventory.nodes:
        argv, planned = _argv(steps, node.name), engine.planned_ports(inventory, node)
        given = {int(argv[i + 1]) for i, word in enumerate(argv) if word == "--port"}
        assert given <= set(planned), node.name
        for port in {e.api_port, e.dist_init_port} & set(planned):  # the plan's own two
            assert any(w == str(port) or w.endswith(f":{port}") for w in argv), (node, port)
