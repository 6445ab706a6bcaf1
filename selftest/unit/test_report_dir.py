"""--report-dir on real folders: each run's reports go in a fresh folder made inside it, which
is left as it was (a sticky 1777 folder keeps its mode); a link planted where a report goes
is never followed; a folder another user owns, or may write in without the sticky bit, is
a usage error naming --report-dir before any test runs."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from infergate.plan.secrets import PrivateFileError, run_folder, write_private
from selftest.suite import PROJECT_CONFIG, ROOT, closed_plan, run_folder_in

NOBODY = 65534
VICTIM = "the owner's own text\n"
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def suite(tmp_path: Path, report_dir: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    """The suite's preflight SSH tests on a plan no node of which answers (a few seconds):
    enough for it to write its preflight report."""
    argv = [sys.executable, "-m", "pytest", *PROJECT_CONFIG, f"--inventory={closed_plan(tmp_path)}"]
    argv += ["-m", "preflight", "-k", "ssh", "--lock-wait", "0", f"--report-dir={report_dir}"]
    argv += [*args, str(ROOT / "tests_preflight")]
    return subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)


def victim(folder: Path) -> Path:
    """A file another user chose, 0644, in FOLDER."""
    path = folder / "victim.txt"
    path.write_text(VICTIM)
    path.chmod(0o644)
    return path


def test_a_sticky_folder_keeps_its_mode_and_its_planted_link(tmp_path: Path) -> None:
    """/tmp-like (1777) with `preflight.json` planted as a link to another file: the run
    writes into a fresh folder of its own, and the folder, the link and its target stay."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    target = victim(tmp_path)
    (shared / "preflight.json").symlink_to(target)
    done = suite(tmp_path, shared)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert (target.read_text(), stat.S_IMODE(target.stat().st_mode)) == (VICTIM, 0o644)
    assert (shared / "preflight.json").is_symlink()
    made = run_folder_in(shared)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert (made / "preflight.json").is_file()


def refusal(tmp_path: Path, report_dir: Path) -> str:
    """The suite's answer to REPORT_DIR: a usage error at once, its message."""
    done = suite(tmp_path, report_dir, "--collect-only")
    said = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, said
    assert "Traceback" not in said
    assert list(report_dir.iterdir()) == []
    return said


@AS_ROOT
def test_a_folder_another_user_owns_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    said = refusal(tmp_path, theirs)
    assert f"--report-dir {theirs}: {theirs} belongs to uid {NOBODY}, expected yours" in said


@pytest.mark.parametrize("mode", [0o770, 0o777], ids=["group-writable", "world-writable"])
def test_a_folder_others_may_write_without_the_sticky_bit_is_refused(
    tmp_path: Path, mode: int
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    said = refusal(tmp_path, shared)
    assert f"--report-dir {shared}: {shared} is writable by group or others" in said
    assert f"(mode {mode:04o}), expected 0700 or a sticky folder" in said
    assert stat.S_IMODE(shared.stat().st_mode) == mode


@AS_ROOT
def test_a_link_to_another_users_folder_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    link = tmp_path / "link"
    link.symlink_to(theirs)
    assert f"{link} belongs to uid {NOBODY}" in refusal(tmp_path, link)


def test_a_file_given_as_the_folder_is_refused(tmp_path: Path) -> None:
    given = victim(tmp_path)
    done = suite(tmp_path, given, "--collect-only")
    said = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, said
    assert f"--report-dir {given}: {given} is not a folder" in said
    assert given.read_text() == VICTIM


@pytest.mark.parametrize("append", [False, True], ids=["write", "append"])
def test_a_link_where_a_report_file_goes_is_never_followed(tmp_path: Path, append: bool) -> None:
    """A write replaces the link with a file of its own; an append refuses it."""
    target = victim(tmp_path)
    planted = tmp_path / "deploy.log"
    planted.symlink_to(target)
    if append:
        with pytest.raises(OSError, match="symbolic links"):
            write_private(planted, "line\n", append=True)
    else:
        write_private(planted, "line\n")
        assert (planted.read_text(), planted.is_symlink()) == ("line\n", False)
    assert (target.read_text(), stat.S_IMODE(target.stat().st_mode)) == (VICTIM, 0o644)


@AS_ROOT
def test_an_append_to_another_users_file_is_refused(tmp_path: Path) -> None:
    theirs = victim(tmp_path)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(PrivateFileError, match="not a file of this run's"):
        write_private(theirs, "line\n", append=True)
    assert (theirs.read_text(), stat.S_IMODE(theirs.stat().st_mode)) == (VICTIM, 0o644)


def test_a_run_folder_is_made_fresh_or_taken_from_this_run(tmp_path: Path) -> None:
    """xdist's workers share the run's folder: the second finds the first's; a folder that
    is not this user's 0700 one, or a link, is refused."""
    old = os.umask(0o077 | 0o200)  # a umask that cuts the owner's own write bit
    try:
        made = run_folder(tmp_path / "reports" / "run1")
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert run_folder(made) == made
    made.chmod(0o750)
    with pytest.raises(PrivateFileError, match="there before this run"):
        run_folder(made)
    (tmp_path / "reports" / "run2").symlink_to(made)
    with pytest.raises(PrivateFileError, match="there before this run"):
        run_folder(tmp_path / "reports" / "run2")
