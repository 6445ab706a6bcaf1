"""The code cites what its users can read: public sources, the recordings under selftest/data
or docs/notes.md, never the project's private reference notes or incident report, which live
outside this repository."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Written so that this file does not match itself (the samples below are split likewise):
# the words field and notes with a space, an underscore, a hyphen or nothing, and a seeds folder
PRIVATE = re.compile(r"field[ _-]?notes|seeds[/]", re.IGNORECASE)
EXEMPT = ("selftest/data/", "docs/")


def private_citations(text: str) -> list[str]:
    """The lines of TEXT that cite the private notes, numbered from 1."""
    return [
        f"{n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if PRIVATE.search(line)
    ]


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no tracked files to read")
    return [p for p in out.decode().split("\0") if p and not p.startswith(EXEMPT)]


@pytest.mark.parametrize(
    "line",
    [
        "# (field" + " notes §1.2)",
        "initialisation said (Field" + "-notes check 6)",
        "# the deployment told in shared/seeds" + "/ (the field report)",
    ],
)
def test_a_private_citation_is_caught(line: str) -> None:
    assert private_citations(f"x = 1\n{line}\n") == [f"2: {line.strip()}"]


def test_public_words_are_not_caught() -> None:
    text = "torch.manual_seed(0)\n# docs/notes.md#two-spark-report; seeds of a random run\n"
    assert private_citations(text) == []


def test_no_tracked_file_cites_the_private_notes() -> None:
    found = {}
    for path in tracked_files():
        file = ROOT / path
        if file.is_file():
            lines = private_citations(file.read_bytes().decode("utf-8", "replace"))
            if lines:
                found[path] = lines
    assert not found, f"cite the public source or docs/notes.md instead: {found}"
