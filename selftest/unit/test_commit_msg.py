"""The repository's commit-msg hook keeps a subject to 72 characters and a blank second
line, as CONTRIBUTING.md asks."""

import subprocess
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[2] / ".githooks" / "commit-msg"


@pytest.mark.parametrize(
    ("message", "accepted"),
    [
        ("Move the plan into plan/\n\nThe why, with figures.\n", True),
        ("x" * 72 + "\n", True),
        ("x" * 73 + "\n\nbody\n", False),
        ("Subject\nbody on the second line\n", False),
        ("# a comment git strips\nSubject\n", True),
    ],
    ids=["subject-and-body", "72", "73", "no-blank-line", "comment-first"],
)
def test_the_hook_judges_the_subject(tmp_path: Path, message: str, accepted: bool) -> None:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    done = subprocess.run([str(HOOK), str(path)], capture_output=True, text=True, check=False)
    assert (done.returncode == 0) is accepted, done.stderr
