"""Which infergate wrote a report: the installed distribution's version and, from a
checkout, its commit (read from .git, without running git)."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ToolVersion:
    name: str
    version: str  # the installed distribution's
    commit: str | None  # the checkout's HEAD; None when installed from a wheel


def tool_version() -> ToolVersion:
    try:
        version = importlib.metadata.version("infergate")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return ToolVersion("infergate", version, checkout_commit(Path(__file__).parents[2]))


def checkout_commit(root: Path) -> str | None:
    """The commit checked out at ROOT, read from .git without running git (a worktree's
    .git is a file naming its git dir); None when ROOT is no checkout."""
    git = root / ".git"
    if git.is_file():
        git = root / git.read_text().strip().removeprefix("gitdir:").strip()
    head = git / "HEAD"
    if not head.is_file():
        return None
    ref = head.read_text().strip()
    if not ref.startswith("ref: "):
        return ref or None  # a detached HEAD holds the commit itself
    return _resolve(git, ref.removeprefix("ref: "))


def _resolve(git: Path, ref: str) -> str | None:
    """A ref's commit: its loose file, in the git dir or the common dir a worktree shares,
    else its line in packed-refs."""
    shared = git / "commondir"
    common = git / shared.read_text().strip() if shared.is_file() else git
    for folder in (git, common):
        if (folder / ref).is_file():
            return (folder / ref).read_text().strip()
    packed = common / "packed-refs"
    lines = packed.read_text().splitlines() if packed.is_file() else []
    return next((line.split()[0] for line in lines if line.endswith(f" {ref}")), None)
