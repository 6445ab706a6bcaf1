"""What a judge returns: problems, each with what was found, what was planned and a remedy."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One way a node differs from the plan: `found` and `planned`, short phrases an operator
    reads side by side, and a `remedy` they can act on at once."""

    found: str
    planned: str
    remedy: str
    code: str = ""  # the catalogue's (infergate.catalogue); the check's own where unset

    def describe(self) -> str:
        code = f"{self.code} " if self.code else ""
        return f"{code}found {self.found}; planned {self.planned}\n    fix: {self.remedy}"


def describe_all(where: str, problems: list[Problem] | tuple[Problem, ...]) -> str:
    """The text of a failure: the node (name and address) first, then each problem."""
    lines = [f"{where}: {len(problems)} problem(s)"]
    lines += [f"  - {p.describe()}" for p in problems]
    return "\n".join(lines)


def last_line(text: str, or_else: str = "") -> str:
    """What a command said last (the last line of its stderr that is not blank): the cause a
    message leads with; OR_ELSE when it said nothing."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else or_else
