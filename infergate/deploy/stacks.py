"""Pure readers of `py-spy dump` (its text form) and the judge of where a hung rank waits.

A dump names the process, then each thread with its frames, innermost first. A rank waits
in the innermost frame of its main thread that is torch.distributed's, a collective
library's or the engine's own (docs/forensics.md#the-waiting-frame).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# where a hung rank's wait means something: the rendezvous, the collectives, the engine
LIBRARIES = ("torch/distributed/", "gloo", "nccl")
ENGINES = ("vllm/", "sglang/")
WAIT_PACKAGES = (*LIBRARIES, *ENGINES)
# frames that only wait for, or pass on, whatever called them
GENERIC = (
    *("threading.py", "selectors.py", "queue.py", "socket.py", "asyncio/", "time.sleep"),
    *("contextlib.py", "functools.py", "<frozen "),
)
MARK = "### pid "  # the dump script's line before each process's dump
WAITS = "where each process waits (py-spy):"  # before the lines of rank_lines
# a remedy's lead where a request to a ready launch hung and the stacks were taken
HUNG = (
    "a request hung past its deadline: the stacks name where each rank waits; a rank in a "
    "collective (all_reduce, broadcast) waits on a peer that never joined it: read that peer's "
    "stacks and last lines first; "
)

_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_THREAD = re.compile(r'^Thread (\S+) \(([^)]*)\)(?:: "(.*)")?$')
_FRAME = re.compile(r"^\s+(.+?) \(([^()]*?)(?::(\d+))?\)$")


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"


@dataclass(frozen=True)
class Thread:
    tid: str
    state: str  # idle, active, active+gil
    name: str
    frames: tuple[Frame, ...]  # innermost first


@dataclass(frozen=True)
class Dump:
    """One process's `py-spy dump`, or what py-spy said instead (ERROR)."""

    pid: int
    command: str = ""
    threads: tuple[Thread, ...] = ()
    error: str = ""


def parse_py_spy_dump(pid: int, text: str) -> Dump:
    """`py-spy dump --pid PID` of one process; text without a `Process` line is py-spy's
    error (a process that is not Python).

    Sample: ``Process 10389: python3 -m x\\nPython v3.11.7 (...)\\n\\nThread 10389 (idle):
    "MainThread"\\n    f (<string>:2)``
    """
    lines = text.splitlines()
    head = next((m for ln in lines if (m := _PROCESS.match(ln))), None)
    if head is None:
        # its cause, without the Rust backtrace that RUST_BACKTRACE=1 adds
        said = lines[: lines.index("Stack backtrace:")] if "Stack backtrace:" in lines else lines
        return Dump(pid, error=" ".join(ln.strip() for ln in said if ln.strip()))
    threads: list[tuple[tuple[str, str, str], list[Frame]]] = []
    for line in lines:
        if found := _THREAD.match(line):
            tid, state, name = found.groups()
            threads.append(((tid, state, name or ""), []))
        elif threads and (frame := _FRAME.match(line)):
            function, file, number = frame.groups()
            threads[-1][1].append(Frame(function, file, int(number or 0)))
    parsed = tuple(Thread(*named, tuple(frames)) for named, frames in threads)
    return Dump(int(head.group(1)), head.group(2).strip(), parsed)


def split_dumps(text: str) -> dict[int, str]:
    """The dump script's output, per pid: each dump follows a `### pid N` line."""
    dumps: dict[int, str] = {}
    pid = None
    for line in text.splitlines():
        if line.startswith(MARK) and line[len(MARK) :].strip().isdigit():
            pid = int(line[len(MARK) :])
            dumps[pid] = ""
        elif pid is not None:
            dumps[pid] += line + "\n"
    return dumps


def main_thread(dump: Dump) -> Thread | None:
    """The thread named MainThread, else the one whose id is the pid, else the first."""
    named = [t for t in dump.threads if t.name == "MainThread"]
    own = [t for t in dump.threads if t.tid == str(dump.pid)]
    return next(iter(named + own + list(dump.threads)), None)


def waiting_in(dump: Dump) -> Frame | None:
    """The frame the process's main thread waits in: its innermost frame in WAIT_PACKAGES,
    else its innermost frame that is not GENERIC; None without a stack."""
    thread = main_thread(dump)
    if thread is None:
        return None
    useful = [f for f in thread.frames if not any(g in f"{f.file} {f.function}" for g in GENERIC)]
    return next(iter([f for f in useful if meant(f)] + useful), None)


def caller(dump: Dump, frame: Frame) -> Frame | None:
    """For a FRAME in a library's package, the innermost frame outside it that leads there
    (the engine's step that waits in torch.distributed), past wrappers and GENERIC ones."""
    thread = main_thread(dump)
    own = package(frame)
    if thread is None or own not in LIBRARIES or frame not in thread.frames:
        return None
    outer = thread.frames[thread.frames.index(frame) + 1 :]
    return next((f for f in outer if package(f) != own and not passes(f)), None)


def passes(frame: Frame) -> bool:
    """Whether FRAME only passes the call on: a decorator's wrapper, or a GENERIC frame."""
    return "<locals>" in frame.function or any(
        g in f"{frame.file} {frame.function}" for g in GENERIC
    )


def package(frame: Frame) -> str:
    return next((p for p in WAIT_PACKAGES if p in frame.file), frame.file)


def meant(frame: Frame) -> bool:
    """Whether FRAME is torch.distributed's, a collective library's or the engine's."""
    return any(p in frame.file for p in WAIT_PACKAGES)


def title(dump: Dump) -> str:
    """How a process calls itself: its title where it set one (`VLLM::Worker_TP1`), else
    its command line's first words after the interpreter, paths by their last part.

    Sample: ``/opt/venv/bin/python3 /opt/venv/bin/vllm serve /srv/models/m ...`` is
    ``vllm serve m``."""
    words = dump.command.split()
    if words and "::" in words[0]:
        return words[0]
    if words and words[0].rsplit("/", 1)[-1].startswith("python"):
        words = words[1:]
    return " ".join(w.rstrip("/").rsplit("/", 1)[-1] for w in words[:3])


def rank_lines(where: str, dumps: list[Dump], stacks: str) -> list[str]:
    """One line per rank (a Python process waiting in WAIT_PACKAGES; every Python process
    where none does): where its main thread waits; STACKS: where the whole dumps are."""
    judged = [(d, waiting_in(d)) for d in dumps if not d.error]
    ranks = [(d, f) for d, f in judged if f and meant(f)] or judged
    lines = []
    for dump, frame in ranks:
        said = f"waiting in {frame}" if frame else "no Python frame on its main thread"
        if frame and (called := caller(dump, frame)):
            said += f", called from {called}"
        lines.append(f"{where} pid {dump.pid} {title(dump)}: {said}; stacks: {stacks}")
    return lines


def waits_clause(lines: list[str]) -> str:
    """LINES (rank_lines') as one clause of a failure's line: "" where none was taken."""
    return f"{WAITS} {' | '.join(lines)}" if lines else ""
