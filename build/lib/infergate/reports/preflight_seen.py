"""The preflight report assembled from what the tests' reports carried (protocol.py): each
node's summary row, memory and model hash figures, the parity matrix, and each check's
outcome and Problems, gathered wherever the tests ran; a `Preflight` at the end.

A check about the nodes together (a parity or balance test) has a cell on every node:
failed where its problems name the node, or on every node when they name none."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infergate.plan.model import Inventory, Node
from infergate.problems import Problem
from infergate.reports.preflight import Cell, Matrix, Memory, Meta, ModelHash, NodeReport, Preflight
from infergate.reports.protocol import (
    CHECK,
    IN_IMAGE_SOURCE,
    MEMORY,
    MODEL_HASH,
    PARITY,
    PROBLEMS,
    ROOT,
    ROW,
    PhaseReport,
    outcome_text,
    properties,
)


@dataclass(frozen=True)
class CheckSeen:
    """What the reports of one test said, before it is spread over the nodes."""

    check: str
    node: str | None  # None: a check of the nodes together
    outcome: str
    problems: Mapping[str, tuple[Problem, ...]] = field(default_factory=dict)
    detail: str = ""
    blocked: str = ""  # the code of the failed root it was skipped for


@dataclass
class PreflightSeen:
    """What the reports said so far, test by test and node by node."""

    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (test id, failure text)
    in_image: dict[str, str] = field(default_factory=dict)  # node -> "cached" or "fresh"
    memory: dict[str, Memory] = field(default_factory=dict)
    model_hash: dict[str, ModelHash] = field(default_factory=dict)
    parity: Matrix = field(default_factory=dict)
    tests: dict[str, CheckSeen] = field(default_factory=dict)  # by test id

    def add(self, report: PhaseReport) -> None:
        said = properties(report)
        if ROW in said:
            self.rows[said[ROW]["node"]] = said[ROW]
        if MEMORY in said:
            node = said[MEMORY].pop("node")
            self.memory[node] = Memory(**said[MEMORY])
        for node, figures in said.get(MODEL_HASH, {}).items():
            self.model_hash[node] = ModelHash(**figures)
        if IN_IMAGE_SOURCE in said:
            self.in_image[said[IN_IMAGE_SOURCE]["node"]] = said[IN_IMAGE_SOURCE]["source"]
        self.parity.update(said.get(PARITY, {}))
        if CHECK in said:
            self.tests[report.nodeid] = seen(self.tests.get(report.nodeid), report, said)
        if report.failed:
            self.failures.append((report.nodeid, str(report.longrepr)))

    def verdict(self, node: str) -> str:
        """FAIL with the count of failed tests about the node (its id, or named in the text)."""
        count = sum(f"[{node}]" in test or f"{node} (" in text for test, text in self.failures)
        return f"FAIL ({count})" if count else "ok"

    def preflight(self, inventory: Inventory, run_id: str, level: str = "standard") -> Preflight:
        """The report of INVENTORY's nodes: a row a node, its checks in their names' order."""
        names = [n.name for n in inventory.nodes]
        per_node: dict[str, list[Cell]] = {n: [] for n in names}
        for test in sorted(self.tests.values(), key=lambda t: t.check):
            for node, cell in cells(test, names).items():
                per_node.setdefault(node, []).append(cell)
        meta = Meta(inventory.name, time.strftime("%Y-%m-%dT%H:%M:%S%z"), run_id, level=level)
        nodes = tuple(self._node(n, per_node[n.name]) for n in inventory.nodes)
        return Preflight(meta, nodes, self.parity)

    def _node(self, node: Node, checks: Sequence[Cell]) -> NodeReport:
        return NodeReport(
            node.name,
            node.address,
            self.rows.get(node.name, {}),
            self.memory.get(node.name),
            tuple(checks),
            self.model_hash.get(node.name),
        )


def seen(before: CheckSeen | None, report: PhaseReport, said: dict[str, Any]) -> CheckSeen:
    """What a test's reports said so far, with REPORT's phase added: an error in setup or
    teardown, the call's outcome, a skip; and the Problems it failed on."""
    about = said[CHECK]
    outcome = before.outcome if before else "passed"
    if report.skipped:
        outcome = "skipped"
    elif report.failed:
        outcome = "failed" if report.when == "call" or outcome == "failed" else "error"
    problems = dict(before.problems) if before else {}
    for node, found in said.get(PROBLEMS, {}).items():
        problems[node] = tuple(Problem(**p) for p in found)
    detail = before.detail if before and before.detail else ""
    if not detail and not report.passed:
        detail = outcome_text(report)
    blocked = said[ROOT][0]["code"] if report.skipped and said.get(ROOT) else ""
    blocked = blocked or (before.blocked if before else "")
    return CheckSeen(about["check"], about["node"], outcome, problems, detail, blocked)


def cells(test: CheckSeen, nodes: Sequence[str]) -> dict[str, Cell]:
    """TEST's cell on each node it is about: its own node, or for a check of the nodes
    together every node, failed where its problems name the node (all when they name none)."""
    if test.node is not None:
        problems = test.problems.get(test.node, ())
        cell = Cell(test.check, test.outcome, problems, test.detail, blocked=test.blocked)
        return {test.node: cell}
    named = test.outcome == "failed" and bool(test.problems)
    found = {}
    for node in nodes:
        outcome = "passed" if named and node not in test.problems else test.outcome
        detail = "" if outcome == "passed" else test.detail
        blocked = test.blocked if outcome == "skipped" else ""
        found[node] = Cell(test.check, outcome, test.problems.get(node, ()), detail, True, blocked)
    return found
