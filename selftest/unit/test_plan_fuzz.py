"""Fuzzing the plan: whatever a mutated shipped plan holds, the gate answers with a model or an
InventoryError (which --plan turns into one usage-error line), never another exception.

Two levels, each with a seeded RNG so that a failure reproduces: the loaded data (a key
deleted, a value replaced by junk or by another key's value) and the file's text (lines
deleted or repeated, control characters and bytes that are not UTF-8, huge numbers, values
with '-' first, types swapped, aliases, truncation).
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.plan.loader import parse_plan
from infergate.plan.model import Inventory, InventoryError, parse_inventory

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
SHIPPED = sorted(p.name for p in INVENTORIES.glob("*.yaml"))


def _exercise(inv: Inventory) -> None:
    """What the fixtures will do with a parsed plan must not fail either."""
    assert inv.head in inv.nodes
    for node in inv.nodes:
        inv.node_env(node)
        inv.mem_needed_gib(node)
        node.ssh_argv("true")


# --- the loaded data -----------------------------------------------------------------------

JUNK: list[object] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2,
    22,
    70000,
    10**400,
    1.5,
    float("nan"),
    float("inf"),
    "",
    " ",
    "abc",
    "{",
    "}",
    "{fabric_ip}",
    "{nope}",
    "{{x}}",
    "10.252.0.11",
    "10.252.0.13/24",
    "10.252.0.0/24",
    "fd00::1",
    "/abs/path",
    "head",
    "worker",
    "vllm",
    "sglang",
    "-x",
    "sha256:" + "0" * 64,
    [],
    ["x"],
    ["head", "worker"],
    [1, None],
    {},
    {"x": 1},
    {1: 2},
    {"A": "{fabric_ip}"},
    {"address": "10.252.0.13/24"},
    "a\nb",
    "--privileged",
    "\x1b[2J",
]
JUNK_KEYS: list[object] = ["junk", "name", "roles", "gpus", "hcas", "mtu", "id", "env", 7, None]


def _slots(node: object) -> list[tuple[Any, Any]]:
    """Every (container, key-or-index) in a loaded YAML tree, depth first."""
    if isinstance(node, dict):
        items: list[tuple[Any, Any]] = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        return []
    found = [(node, key) for key, _ in items]
    for _, child in items:
        found += _slots(child)
    return found


def _mutate(data: dict[str, Any], rng: random.Random) -> None:
    container, key = rng.choice(_slots(data))
    action = rng.choice(["delete", "replace", "replace", "insert", "swap"])
    if action == "delete":
        del container[key]
    elif action == "replace":
        container[key] = copy.deepcopy(rng.choice(JUNK))
    elif action == "insert" and isinstance(container, dict):
        container[rng.choice(JUNK_KEYS)] = copy.deepcopy(rng.choice(JUNK))
    elif action == "swap":  # a value of the wrong type, but one that is real elsewhere
        other, other_key = rng.choice(_slots(data))
        container[key] = copy.deepcopy(other[other_key])


@pytest.mark.parametrize("base", SHIPPED)
def test_mutated_inventories_only_ever_raise_inventory_error(base: str) -> None:
    rng = random.Random(f"infergate-{base}")  # deterministic: a failure reproduces
    good = yaml.safe_load((INVENTORIES / base).read_text())
    outcomes = {"parsed": 0, "rejected": 0}
    unlocated: list[str] = []
    for variant in range(400):
        data = copy.deepcopy(good)
        for _ in range(rng.randint(1, 3)):
            if _slots(data):
                _mutate(data, rng)
        try:
            _exercise(parse_inventory(data))
            outcomes["parsed"] += 1
        except InventoryError as e:
            outcomes["rejected"] += 1
            if not str(e).startswith(f"{e.path}: "):
                unlocated.append(str(e))
        except Exception as e:  # the property under test: nothing else ever escapes
            pytest.fail(f"variant {variant} raised {e!r} for {data!r}")
    assert unlocated == []
    assert outcomes["rejected"] > 100, outcomes  # the mutations do break things
    assert outcomes["parsed"] > 0, outcomes  # and harmless ones are still accepted


# --- the file's text -----------------------------------------------------------------------

# `key: value` or `- value` on one line: the value is what most mutations replace
_VALUE = re.compile(r"^(\s*(?:- )?(?:[\w\"']+:\s+)?)(\S.*)$")
NASTY_VALUES = [
    "9" * 5000,
    str(2**64),
    "1e999",
    "-1e-9",
    "1.0e-9",
    ".nan",
    ".inf",
    "-.inf",
    "0x7fffffff",
    "[]",
    "{}",
    "null",
    "~",
    "true",
    "[a, b]",
    "{x: 1}",
    "'0'",
    "*undefined",
    "&a x",
    "!!binary AA",
    "!!python/name:os.system",
    "2026-02-30",
    '"a\\nb"',
    '"\\0"',
    '"\\e[2J"',
    '"\\u2028"',
    "|\n  x",
]
ESCAPES = ["\\n", "\\r", "\\t", "\\e", "\\0", "\\L"]  # YAML's, in a double-quoted value
CONTROL = ["\x00", "\x01", "\x1b", "\t", "\r", "\x7f", "\x85", "\u2028", "\ufeff"]
BOMB = "".join(
    ["l0: &l0 [x, x, x, x, x, x, x, x, x]\n"]
    + [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 9)]
)
Mutation = Callable[[list[str], random.Random], None]


def _a_value(lines: list[str], rng: random.Random) -> tuple[int, re.Match[str]] | None:
    found = [(i, m) for i, line in enumerate(lines) if (m := _VALUE.match(line))]
    return rng.choice(found) if found else None


def _replace_value(lines: list[str], rng: random.Random) -> None:
    hit = _a_value(lines, rng)
    if hit:
        i, m = hit
        lines[i] = m[1] + rng.choice(NASTY_VALUES)


def _dash_value(lines: list[str], rng: random.Random) -> None:
    hit = _a_value(lines, rng)
    if hit:
        i, m = hit
        lines[i] = m[1] + rng.choice(["-", "--privileged ", "-oProxyCommand=id "]) + m[2]


def _escape_in_value(lines: list[str], rng: random.Random) -> None:
    hit = _a_value(lines, rng)
    if hit:
        i, m = hit
        bare = m[2].strip("\"'").replace("\\", "").replace('"', "")
        lines[i] = f'{m[1]}"{bare}{rng.choice(ESCAPES)}x"'


def _control_char(lines: list[str], rng: random.Random) -> None:
    i = rng.randrange(len(lines))
    at = rng.randint(0, len(lines[i]))
    lines[i] = lines[i][:at] + rng.choice(CONTROL) + lines[i][at:]


def _delete_line(lines: list[str], rng: random.Random) -> None:
    del lines[rng.randrange(len(lines))]


def _repeat_line(lines: list[str], rng: random.Random) -> None:
    i = rng.randrange(len(lines))
    lines.insert(i, lines[i])  # a repeated key, or one more list item


def _indent(lines: list[str], rng: random.Random) -> None:
    i = rng.randrange(len(lines))
    lines[i] = lines[i][2:] if rng.random() < 0.5 else "  " + lines[i]


def _truncate(lines: list[str], rng: random.Random) -> None:
    del lines[rng.randrange(len(lines)) :]


def _bomb(lines: list[str], rng: random.Random) -> None:
    lines[:0] = BOMB.splitlines()


MUTATIONS: list[Mutation] = [
    _replace_value,
    _replace_value,
    _dash_value,
    _escape_in_value,
    _control_char,
    _delete_line,
    _repeat_line,
    _indent,
    _truncate,
    _bomb,
]


def _mutant(text: str, rng: random.Random) -> bytes:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        if lines:
            rng.choice(MUTATIONS)(lines, rng)
    raw = bytearray("\n".join(lines).encode())
    if raw and rng.random() < 0.05:  # a byte that is not UTF-8
        raw[rng.randrange(len(raw))] = rng.choice([0x80, 0xC3, 0xE9, 0xFF])
    return bytes(raw)


@pytest.mark.parametrize("base", SHIPPED)
def test_mutated_plan_files_parse_or_are_refused_cleanly(base: str) -> None:
    """100 mutants of each shipped plan: each is a plan or a located InventoryError."""
    rng = random.Random(f"infergate-text-{base}")
    text = (INVENTORIES / base).read_text()
    outcomes = {"parsed": 0, "rejected": 0}
    unlocated: list[str] = []
    for variant in range(100):
        raw = _mutant(text, rng)
        try:
            _exercise(parse_plan(raw))
            outcomes["parsed"] += 1
        except InventoryError as e:
            outcomes["rejected"] += 1
            for one in e.errors:  # each problem: one line that says where
                if not (one.path or one.line) or "\n" in str(one):
                    unlocated.append(f"variant {variant}: {one!r}")
        except Exception as e:  # the property under test: nothing else ever escapes
            pytest.fail(f"variant {variant} raised {e!r} for {raw[:2000]!r}")
    assert unlocated == []
    assert outcomes["rejected"] > 50, outcomes
    assert outcomes["parsed"] > 0, outcomes
