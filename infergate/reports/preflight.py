"""The preflight report's model: each check's cell on each node, each node's summary row,
memory and model hash figures, and the parity matrix across the nodes.

preflight_json.py and preflight_html.py are its formats (files.py writes them);
preflight_seen.py assembles it from what the tests' reports carried."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from infergate.checks.model_hash import ModelHashes
from infergate.problems import Problem
from infergate.reports.version import ToolVersion, tool_version

OUTCOMES = ("passed", "failed", "skipped", "error")
Matrix = dict[str, dict[str, str]]  # attribute -> node -> value, as checks.parity has it


@dataclass(frozen=True)
class Cell:
    """One check's result on one node."""

    check: str  # the test: its file and function, test_memory.py::test_memory_available_...
    outcome: str  # one of OUTCOMES
    problems: tuple[Problem, ...] = ()
    detail: str = ""  # the failure's text, shown where no Problem says it; or why it skipped
    cluster: bool = False  # a check of the nodes together


@dataclass(frozen=True)
class Memory:
    total: int  # bytes, MemTotal
    available: int  # bytes, MemAvailable
    usable: int  # bytes: MemAvailable, or less under a cgroup limit
    needed_gib: float  # Inventory.mem_needed_gib


@dataclass(frozen=True)
class ModelHash:
    """What hashing the model took on one node (checks.model_hash.ModelHashes' figures)."""

    files: int  # files in the model directory
    hashed: int  # files hashed this time
    hashed_bytes: int  # bytes read to hash them
    seconds: float
    cache_hits: int  # files whose digest came from the node's cache, unchanged

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


@dataclass(frozen=True)
class Preflight:
    meta: Meta
    nodes: tuple[NodeReport, ...]
    parity: Matrix = field(default_factory=dict)
