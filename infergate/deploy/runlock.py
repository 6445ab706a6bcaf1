"""The cluster lock: one run at a time on a cluster, for the preflight and the deploy.

`flock(1)` on the head, held by a shell that one SSH session of the run keeps open for the
run's whole life, so it is released on every exit path with no clean-up code; a note beside
it names the holder (docs/deploy-and-inference.md#cluster-lock). The holder's side is at the
end, one process per request; the rest is pure.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from infergate.plan.model import Inventory
from infergate.problems import Problem, last_line
from infergate.remote.ssh_config import ssh_command

LOCK_DIR = "/run/infergate/lock"  # tmpfs: a reboot leaves no stale holder note
HELD, BUSY = "HELD", "BUSY"
BUSY_EXIT = 75  # EX_TEMPFAIL
SSH_FAILED = 255
# for the lock's ssh to end once its stdin closed, before it is killed
RELEASE_S = 10.0
# for the head's answer past the connect timeout (a slow login, a busy head)
ANSWER_S = 15.0


@dataclass(frozen=True)
class Holder:
    """Who holds (or asks for) the lock."""

    run_id: str
    plan: str
    user: str  # user@controller
    pid: int  # the controller's pytest process
    started: str  # UTC, ISO 8601

    def describe(self) -> str:
        by = f"plan {self.plan}, by {self.user}, pid {self.pid}, since {self.started}"
        return f"run {self.run_id} ({by})"


def lock_dir(inventory: Inventory) -> str:
    """The lock's directory on the head: one per head address, so that two clusters whose
    heads share a filesystem (the lab's nodes and this controller) do not share a lock."""
    return f"{LOCK_DIR}/{inventory.head.address}"


def lock_command(holder: Holder, wait_s: float, lock_dir: str = LOCK_DIR) -> str:
    """Shell for the head: take the lock (waiting up to WAIT_S), write HOLDER beside it, say
    HELD and keep it until stdin ends; or say BUSY with the holder's note and exit 75."""
    note = shlex.quote(json.dumps(holder.__dict__))
    take = f"flock -w {wait_s:g} 9" if wait_s > 0 else "flock -n 9"
    d = shlex.quote(lock_dir)
    return "\n".join(
        [
            f"mkdir -p {d} && exec 9>>{d}/cluster.lock || exit 71",
            f"if ! {take}; then",
            f'  printf "{BUSY} %s %s\\n" "$(cat {d}/holder.pid 2>/dev/null)" '
            f'"$(cat {d}/holder.json 2>/dev/null)"; exit {BUSY_EXIT}',
            "fi",
            f"printf '%s\\n' {note} > {d}/holder.json; echo $$ > {d}/holder.pid",
            f"echo {HELD}",
            # hold until stdin ends; only this shell holds the lock, so `kill PID` frees it too
            "cat >/dev/null 9>&-",
        ]
    )


@dataclass(frozen=True)
class Busy:
    """The lock is held by another run: its note, and its shell's pid on the head."""

    holder: Holder | None
    head_pid: str
    said: str


def parse_lock_reply(line: str) -> Busy | None:
    """None when the lock is ours, else who holds it. A sample of each form: ``HELD`` and
    ``BUSY 4242 {"run_id": "20261201-030102-8f3a...", "plan": "lab", ...}``."""
    if line.strip() == HELD:
        return None
    _, _, rest = line.strip().partition(" ")
    pid, _, note = rest.partition(" ")
    try:
        doc = json.loads(note)
        holder: Holder | None = Holder(**doc) if isinstance(doc, dict) else None
    except (ValueError, TypeError):
        holder = None
    return Busy(holder, pid, line.strip())


def busy_problem(busy: Busy, wait_s: float, head: str) -> Problem:
    """The second run's refusal: who holds the cluster, and what to do."""
    who = busy.holder.describe() if busy.holder else f"a holder that left no note ({busy.said})"
    waited = f"after waiting {wait_s:g} s" if wait_s > 0 else "at once"
    end = shlex.join(["kill", busy.head_pid]) if busy.head_pid.isdigit() else "kill its flock"
    return Problem(
        f"the cluster lock is held by {who}; refused {waited}",
        "this run alone on the cluster (the preflight and the deploy take the lock)",
        "another run is using the cluster: wait for it to end, or pass --lock-wait SECONDS "
        f"to queue behind it; if that run is gone but its SSH session hangs, end the holder on "
        f"{head}: `{end}`",
    )


def no_reply_problem(status: int | None, stderr: str, head: str) -> Problem:
    """The head answered the lock request with neither HELD nor BUSY: no flock(1) there
    (127), its lock directory not writable (71), or no answer before the deadline (None)."""
    said = last_line(stderr, "no output")
    causes = {
        127: "flock(1) is missing on the head: install util-linux there",
        71: f"{LOCK_DIR} cannot be written on the head: make it writable for the SSH user",
        None: "the head did not answer in time: check its load and `pytest -m preflight -k ssh`",
    }
    cause = causes.get(status, "read what the head said above")
    return Problem(
        f"no answer to the lock request (exit {status}): {said[:300]}",
        f"the cluster lock taken on the head {head}",
        cause,
    )


# -- the holder's side: one ssh (or sh) process per request


def this_holder(run_id: str, plan: str) -> Holder:
    """This process as the holder of RUN_ID, now."""
    user = f"{getpass.getuser()}@{socket.gethostname()}"
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return Holder(run_id, plan, user, os.getpid(), started)


class HeldLock:
    """The SSH session that holds the lock on the head."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def release(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()  # the head's `cat` ends, and with it the lock
        try:
            self.process.wait(timeout=RELEASE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def ask_lock(
    inventory: Inventory, config: Path, holder: Holder, wait_s: float
) -> tuple[HeldLock | None, Busy | None, tuple[int | None, str]]:
    """One request for the lock, over the plan's ssh_config CONFIG: held, or who holds it,
    or ssh's exit status and stderr."""
    argv = ssh_command(config, inventory.head, lock_command(holder, wait_s, lock_dir(inventory)))
    pipe = subprocess.PIPE
    # a session of its own: a terminal's Ctrl-C must not end it before the teardown
    process = subprocess.Popen(
        argv, stdin=pipe, stdout=pipe, stderr=pipe, text=True, start_new_session=True
    )
    return read_answer(process, wait_s + inventory.thresholds.connect_timeout_s + ANSWER_S)


def read_answer(
    process: subprocess.Popen[str], timeout_s: float
) -> tuple[HeldLock | None, Busy | None, tuple[int | None, str]]:
    """The lock request PROCESS's answer within TIMEOUT_S, as ask_lock returns it."""
    line = _first_line(process, timeout_s)
    busy = parse_lock_reply(line) if line else None
    if line and busy is None:
        return HeldLock(process), None, (0, "")
    # ended by itself (refused, ssh failed), or killed now
    HeldLock(process).release()
    # an empty answer too carries ssh's status (docs/deploy-and-inference.md#cluster-lock)
    return None, busy, (process.returncode if line is not None else None, _stderr(process))


def _first_line(process: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The process's first line of output ("" when it closed its output without one), or
    None when nothing came within TIMEOUT_S."""
    got: list[str] = []
    out = process.stdout
    assert out is not None
    reader = threading.Thread(target=lambda: got.append(out.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return got[0].strip() if got else None


def _stderr(process: subprocess.Popen[str]) -> str:
    """What an ended process wrote to stderr."""
    return process.stderr.read() if process.stderr else ""
