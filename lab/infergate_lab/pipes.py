"""Streaming big things from one process into another (an image tarball into `ssh NODE docker
load`, a directory through `tar c | ... | tar x`) under one deadline, without holding them in
memory; a failure names the stage that failed and quotes its stderr."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from infergate_lab.shell import LabError


def pipeline(
    stages: Sequence[Sequence[str]],
    timeout: float,
    stdin_path: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """Run the stages as `a | b | c` (stdin of the first from stdin_path, if given); returns
    the last stage's stdout. All are killed when the deadline passes."""
    procs: list[subprocess.Popen[bytes]] = []
    full_env = {**os.environ, **env} if env else None
    with contextlib.ExitStack() as stack:
        errs = [stack.enter_context(tempfile.TemporaryFile()) for _ in stages]
        stack.callback(_kill_all, procs)
        src: IO[bytes] | int = subprocess.DEVNULL
        if stdin_path is not None:
            src = stack.enter_context(open(stdin_path, "rb"))
        for argv, err in zip(stages, errs, strict=True):
            p = subprocess.Popen(
                list(argv), stdin=src, stdout=subprocess.PIPE, stderr=err, env=full_env, cwd="/"
            )
            if not isinstance(src, int):
                src.close()  # the child holds it now; the reader must see EOF when it exits
            src = p.stdout if p.stdout is not None else subprocess.DEVNULL
            procs.append(p)
        out = _finish(procs, timeout, stages)
        _check(procs, errs, stages)
        return out


def _kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _finish(
    procs: list[subprocess.Popen[bytes]], timeout: float, stages: Sequence[Sequence[str]]
) -> str:
    end = time.monotonic() + timeout
    try:
        out, _ = procs[-1].communicate(timeout=timeout)
        for p in procs[:-1]:
            p.wait(timeout=max(0.1, end - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise LabError(f"`{_show(stages)}` did not finish within {timeout:g} s") from None
    return out.decode(errors="replace")


def _check(
    procs: list[subprocess.Popen[bytes]], errs: Sequence[IO[bytes]], stages: Sequence[Sequence[str]]
) -> None:
    for p, err, argv in zip(procs, errs, stages, strict=True):
        if p.returncode != 0:
            err.seek(0)
            msg = err.read().decode(errors="replace").strip()[-2000:]
            raise LabError(
                f"`{' '.join(argv)}` (in `{_show(stages)}`) exited {p.returncode}: {msg}"
            )


def _show(stages: Sequence[Sequence[str]]) -> str:
    return " | ".join(" ".join(a)[:120] for a in stages)
