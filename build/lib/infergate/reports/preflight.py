"""The preflight report's model: each check's cell on each node, each node's summary row,
memory and model hash figures, and the parity matrix across the nodes.

preflight_json.py and preflight_html.py are its formats (files.py writes them);
preflight_seen.py assembles it from what the tests' reports carried, and verdict.py's causes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from infergate.checks.model_hash import ModelHashes
from infergate.problems import Problem
from infergate.reports.verdict import Cause
from infergate.reports.version import ToolVersion, tool_version

OUTCOMES = ("passed", "failed", "skipped", "error")
# attribute -> node -> value, as checks.parity has it
Matrix = dict[str, dict[str, str]]


@dataclass(frozen=True)
class Cell:
    """One check's result on one node: the test (`test_memory.py::test_memory_...`), one of
    OUTCOMES, its problems, and the failure's text where no Problem says it (or the skip's
    reason); CLUSTER for a check of the nodes together."""

    check: str
    outcome: str
    problems: tuple[Problem, ...] = ()
    detail: str = ""
    cluster: bool = False
    blocked: str = ""  # skipped for a failed root: that root's code


@dataclass(frozen=True)
class Memory:
    """A node's memory in bytes: MemTotal, MemAvailable, and what is usable (MemAvailable, or
    less under a cgroup limit); and what the plan needs (Inventory.mem_needed_gib)."""

    total: int
    available: int
    usable: int
    needed_gib: float


@dataclass(frozen=True)
class ModelHash:
    """What hashing the model took on one node (checks.model_hash.ModelHashes' figures): the
    model's files, those hashed this time and the bytes read for them, the seconds, and the
    files whose digest came from the node's cache."""

    files: int
    hashed: int
    hashed_bytes: int
    seconds: float
    cache_hits: int

    @classmethod
    def of(cls, hashes: ModelHashes) -> ModelHash:
        files = len(hashes.sha256)
        return cls(files, hashes.hashed, hashes.hashed_bytes, hashes.seconds, hashes.cache_hits)


@dataclass(frozen=True)
class NodeReport:
    node: str
    address: str
    summary: Mapping[str, str] = field(default_factory=dict)  # summary.summary_row
    memory: Memory | None = None
    checks: tuple[Cell, ...] = ()
    model_hash: ModelHash | None = None


@dataclass(frozen=True)
class Meta:
    inventory: str
    time: str  # ISO 8601
    run_id: str
    tool: ToolVersion = field(default_factory=tool_version)
    level: str = "standard"  # --level: the tiers of checks the run selected


@dataclass(frozen=True)
class Preflight:
    meta: Meta
    nodes: tuple[NodeReport, ...]
    parity: Matrix = field(default_factory=dict)
    causes: tuple[Cause, ...] = ()  # the verdict's (verdict.py), each once
    not_run: int = 0  # checks skipped for a root
    requirements: Mapping[str, str] = field(default_factory=dict)  # check -> its words
