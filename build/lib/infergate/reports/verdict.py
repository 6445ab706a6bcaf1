"""The verdict a run ends with: READY or NOT READY, then each cause once, roots first, grouped
by node, with its code and its fix; gathered from what the tests' reports carried."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from infergate.catalogue import WARN, entry
from infergate.reports.protocol import CHECK, PROBLEMS, ROOT, PhaseReport, properties

CLUSTER = "the cluster"  # a cause no node is named for


@dataclass(frozen=True)
class Cause:
    code: str
    where: str  # the node's name and address, an endpoint, or CLUSTER
    said: str
    remedy: str
    check: str  # the check that reported it
    root: bool = False
    warn: bool = False


@dataclass
class Verdict:
    """What the reports said so far: the causes, and the checks skipped for a root."""

    wheres: Mapping[str, str]  # node name -> "node1 (10.0.0.1)"
    causes: dict[tuple[str, str, str], Cause] = field(default_factory=dict)
    not_run: int = 0
    checks: int = 0  # reports of the suite's checks seen

    def add(self, report: PhaseReport) -> None:
        said = properties(report)
        check = str(said.get(CHECK, {}).get("check") or report.nodeid.rpartition("::")[2])
        found = entry(check.rpartition("::")[2])
        if found is None:  # not one of the suite's checks (a selftest of this project)
            return
        self.checks += 1
        if report.skipped and ROOT in said:
            self.not_run += 1
            for b in said[ROOT]:
                self._add(Cause(b["code"], b["where"], b["said"], b["remedy"], b["reporter"], True))
            return
        root, warn = bool(found.root), found.severity == WARN
        problems = said.get(PROBLEMS, {})
        for node, listed in problems.items():
            for p in listed:
                where = self.wheres.get(node, node)
                text = p["found"] if root else f"found {p['found']}; planned {p['planned']}"
                cause = Cause(p.get("code") or found.code, where, text, p["remedy"], check)
                self._add(replace(cause, root=root, warn=warn), firm=True)
        if report.failed and not problems:
            text = str(report.longrepr).strip().splitlines()
            last = text[-1] if text else "failed"
            self._add(Cause(found.code, CLUSTER, last, "", check, root), firm=True)

    def _add(self, cause: Cause, firm: bool = False) -> None:
        """A root once per node and code, however many checks it stopped; its own check's
        words (FIRM) over a skip's."""
        key = (cause.code, cause.where, "" if cause.root else cause.said)
        if firm or key not in self.causes:
            self.causes[key] = cause

    @property
    def ready(self) -> bool:
        return not any(not c.warn for c in self.causes.values())

    def lines(self, level: str = "") -> list[str]:
        """The verdict block: its first line, then each cause by node, roots first."""
        causes = list(self.causes.values())
        out = [headline(causes, self.not_run, level)]
        for where, listed in by_where(causes):
            out.append(where)
            for c in listed:
                mark = "warn " if c.warn else ""
                out.append(f"  {mark}{c.code or '(no code)'} {c.said}")
                if c.remedy:
                    out.append(f"    fix: {c.remedy}")
        return out


def headline(causes: Sequence[Cause], not_run: int, level: str = "") -> str:
    """The verdict's first line: READY or NOT READY, and how many causes of each kind."""
    failing = [c for c in causes if not c.warn]
    warned = len(causes) - len(failing)
    at = f" (level {level})" if level else ""
    if not failing:
        return f"READY{at}: no check failed" + (f", {warned} warning(s)" if warned else "")
    roots = sum(c.root for c in failing)
    return (
        f"NOT READY{at}: {roots} root cause(s), {len(failing) - roots} other "
        f"failure(s); {not_run} check(s) not run because of a root"
    )


def by_where(causes: Sequence[Cause]) -> list[tuple[str, list[Cause]]]:
    """CAUSES grouped by where they are, failures before warnings and roots first."""
    order = sorted(causes, key=lambda c: (c.warn, not c.root, c.where != CLUSTER))
    wheres = list(dict.fromkeys(c.where for c in order))
    return [(where, [c for c in order if c.where == where]) for where in wheres]
