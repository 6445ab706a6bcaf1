"""What a test's reports carry to infergate's reports, read without pytest: each fact as a
JSON text under a versioned property name in pytest's user_properties, and the few fields of
pytest's TestReport that the reports read (`PhaseReport`).

A name's meaning never changes: a new shape of a fact is a new name (its .v2). Each name's
shape: docs/reports.md#what-a-tests-report-carries."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

CHECK = "infergate.check.v2"  # v2: with the catalogue's code and severity
PROBLEMS = "infergate.problems.v2"  # v2: each problem with its code
ROW = "infergate.node_summary.v1"
MEMORY = "infergate.node_memory.v1"
PARITY = "infergate.parity.v1"
IN_IMAGE_SOURCE = "infergate.in_image_source.v1"
MODEL_HASH = "infergate.model_hash.v1"
ROOT = "infergate.root.v1"  # the failed roots a skipped check names
NOT_CHECKED = "infergate.not_checked.v1"  # the nodes a cluster check could not judge
CODE = "infergate.code.v1"  # a deploy or inference check's code and severity
OURS = (CHECK, PROBLEMS, ROW, MEMORY, PARITY, IN_IMAGE_SOURCE, MODEL_HASH, ROOT, NOT_CHECKED, CODE)


class PhaseReport(Protocol):
    """One phase's report of a test (setup, call or teardown), as pytest's TestReport has it."""

    @property
    def nodeid(self) -> str: ...
    @property
    def when(self) -> str | None: ...
    @property
    def outcome(self) -> str: ...
    @property
    def passed(self) -> bool: ...
    @property
    def failed(self) -> bool: ...
    @property
    def skipped(self) -> bool: ...
    @property
    def longrepr(self) -> object: ...
    @property
    def user_properties(self) -> Sequence[tuple[str, object]]: ...


def properties(report: PhaseReport) -> dict[str, Any]:
    """REPORT's facts under our names, read from their JSON."""
    return {key: json.loads(str(value)) for key, value in report.user_properties if key in OURS}


def outcome_text(report: PhaseReport) -> str:
    """A failure's message, or a skip's reason (longrepr is (file, line, reason) then)."""
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[-1]).removeprefix("Skipped: ")
    return str(report.longrepr)[:2000]
