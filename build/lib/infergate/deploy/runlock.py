"""The cluster lock: one run at a time on a cluster's machines, for the preflight and the deploy.

`flock(1)` on every distinct machine of the plan (keyed by its /etc/machine-id and boot id,
taken in that order), each held by a shell that one SSH session of the run keeps open for
the run's whole life, so it is released on every exit path with no clean-up code; a note
beside it names the holder, and a watch reports a session that ends before its release
(docs/deploy-and-inference.md#cluster-lock). The holder's side is at the end, one process
per request; the rest is pure.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infergate.plan.model import Inventory, Node
from infergate.problems import Problem, last_line
from infergate.remote.ssh_config import ssh_command

# tmpfs (a reboot leaves no stale holder note), 0700 and the SSH user's: no one else can hold it
LOCK_DIR = "/run/infergate-lock"
MACHINE, HELD, BUSY = "MACHINE", "HELD", "BUSY"
NO_MACHINE_ID, NO_LOCK_DIR, OPEN_LOCK_DIR = 70, 71, 72
BUSY_EXIT = 75  # EX_TEMPFAIL
SSH_FAILED = 255
# for the lock's ssh to end once its stdin closed, before it is killed
RELEASE_S = 10.0
# for the node's answer past the connect timeout (a slow login, a busy node)
ANSWER_S = 15.0
# --lock-wait's bound: a day
MAX_WAIT_S = 86400.0


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


def lock_command(holder: Holder, lock_dir: str = LOCK_DIR) -> str:
    """Shell for a node: say MACHINE and the machine's key, then, on a line `take WAIT`,
    take the lock in LOCK_DIR (waiting up to WAIT s), write HOLDER beside it, say HELD and
    keep it until stdin ends; or say BUSY, the holder's pid, whether it is verified, its note."""
    note = shlex.quote(json.dumps(holder.__dict__))
    d = shlex.quote(lock_dir)
    lock = f"{d}/cluster.lock"
    holds = f"[ /proc/$p/fd/9 -ef {lock} ] && grep -qs '^lock:.*FLOCK' /proc/$p/fdinfo/9"
    return "\n".join(
        [
            "m=$(cat /etc/machine-id 2>/dev/null)",
            f"[ -n \"$m\" ] || {{ echo 'no /etc/machine-id' >&2; exit {NO_MACHINE_ID}; }}",
            f'echo "{MACHINE} $m:$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"',
            'read -r go wait && [ "$go" = take ] || exit 0',
            f"umask 077; [ -d {d} ] || mkdir -m 0700 {d} || exit {NO_LOCK_DIR}",
            f"if [ -L {d} ] || [ ! -O {d} ] || ! stat -c %a {d} | grep -q '00$'; then",
            f'  echo "{lock_dir}: owner $(stat -c %U {d}), mode $(stat -c %a {d}), SSH user '
            f'$(id -un)" >&2; exit {OPEN_LOCK_DIR}',
            "fi",
            f"command exec 9>>{lock} || exit {NO_LOCK_DIR}",
            'if ! flock -w "$wait" 9; then',
            f"  p=$(cat {d}/holder.pid 2>/dev/null); case $p in ''|*[!0-9]*) p=0;; esac; v=no",
            # alive, and its fd 9 is this file with the lock on it (a waiter's has none)
            f"  {holds} && v=yes",
            f'  echo "{BUSY} $p $v $(cat {d}/holder.json 2>/dev/null)"; exit {BUSY_EXIT}',
            "fi",
            f"printf '%s\\n' {note} > {d}/holder.json; echo $$ > {d}/holder.pid",
            f"echo {HELD}",
            # until stdin ends; a subshell, or dash moves fd 9 aside (docs: #cluster-lock)
            "(exec cat >/dev/null 9>&-)",
            f"rm -f {d}/holder.json {d}/holder.pid",
        ]
    )


@dataclass(frozen=True)
class Busy:
    """The lock is held by another run: its note, its shell's pid on the node, and whether
    the node verified that this pid is alive and holds the lock."""

    holder: Holder | None
    head_pid: str
    verified: bool
    said: str


def parse_lock_reply(line: str) -> Busy | None:
    """None when the lock is ours, else who holds it. A sample of each form: ``HELD`` and
    ``BUSY 4242 yes {"run_id": "20261201-030102-8f3a...", "plan": "lab", ...}``."""
    if line.strip() == HELD:
        return None
    _, _, rest = line.strip().partition(" ")
    pid, _, rest = rest.partition(" ")
    verified, _, note = rest.partition(" ")
    try:
        doc = json.loads(note)
        holder: Holder | None = Holder(**doc) if isinstance(doc, dict) else None
    except (ValueError, TypeError):
        holder = None
    return Busy(holder, pid, verified == "yes", line.strip())


def by_machine(answers: list[tuple[Node, str]]) -> dict[str, list[Node]]:
    """The nodes by the machine each is on (NODE, its key), in key order: every run takes
    the locks in one order, whatever its plan names the machines, so none waits in a cycle."""
    machines: dict[str, list[Node]] = {}
    for node, key in answers:
        machines.setdefault(key, []).append(node)
    return dict(sorted(machines.items()))


def busy_problem(busy: Busy, wait_s: float, where: str, lock_dir: str = LOCK_DIR) -> Problem:
    """The second run's refusal: who holds the cluster, and what to do; `kill` only for a
    pid the node verified (alive, and holding the lock)."""
    who = busy.holder.describe() if busy.holder else f"a holder that left no note ({busy.said})"
    waited = f"after waiting {wait_s:g} s" if wait_s > 0 else "at once"
    if busy.verified:
        end = f"`kill {busy.head_pid}` (the node verified that this process holds the lock)"
    else:
        end = (
            f"`fuser -v {lock_dir}/cluster.lock` names the processes that have it open (the "
            f"note's pid {busy.head_pid} is not alive or does not hold it): end one only once "
            "you know its run is gone"
        )
    return Problem(
        f"the cluster lock is held by {who}; refused {waited}",
        "this run alone on the cluster (the preflight and the deploy take the lock)",
        "another run is using the cluster: wait for it to end, or pass --lock-wait SECONDS "
        f"to queue behind it; if that run is gone but its SSH session hangs, end the holder on "
        f"{where}: {end}",
    )


def provision(user: str, lock_dir: str = LOCK_DIR) -> str:
    """The root commands that give USER the lock folder, now and after every boot."""
    now = shlex.join(["install", "-d", "-m", "0700", "-o", user, lock_dir])
    line = shlex.quote(f"d {lock_dir} 0700 {user} - -")
    return f"`{now}` and `echo {line} > /etc/tmpfiles.d/infergate-lock.conf`"


def no_reply_problem(status: int | None, stderr: str, where: str, user: str) -> Problem:
    """The node answered the lock request with neither HELD nor BUSY: no flock(1) (127), no
    machine id (70), its lock folder not the SSH user's (71, 72), or no answer in time."""
    said = last_line(stderr, "no output")
    causes = {
        127: "flock(1) is missing on the node: install util-linux there",
        NO_MACHINE_ID: "the lock is keyed by the machine's id: make one on the node "
        "(`systemd-machine-id-setup`)",
        NO_LOCK_DIR: f"the SSH user {user} cannot make or write {LOCK_DIR} on the node: as "
        f"root there, run {provision(user)}",
        OPEN_LOCK_DIR: f"{LOCK_DIR} must be a folder of the SSH user {user} alone (0700), or "
        f"any local user could hold the lock: as root there, run {provision(user)}",
        None: "the node did not answer in time: check its load and `pytest -m preflight -k ssh`",
    }
    return Problem(
        f"no answer to the lock request (exit {status}): {said[:300]}",
        f"the cluster lock taken on {where}",
        causes.get(status, "read what the node said above"),
    )


@dataclass(frozen=True)
class Refusal:
    """The lock not taken on NODE: who holds it, or what the request ended with."""

    node: Node
    busy: Busy | None
    status: int | None
    said: str

    def problem(self, wait_s: float, lock_dir: str = LOCK_DIR) -> Problem:
        if self.busy:
            return busy_problem(self.busy, wait_s, self.node.where, lock_dir)
        return no_reply_problem(self.status, self.said, self.node.where, self.node.ssh.user)


# -- the holder's side: one ssh (or sh) process per request


def this_holder(run_id: str, plan: str) -> Holder:
    """This process as the holder of RUN_ID, now."""
    user = f"{getpass.getuser()}@{socket.gethostname()}"
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return Holder(run_id, plan, user, os.getpid(), started)


class HeldLock:
    """The SSH session that holds the lock on one machine, watched: LOST hears of its end
    before release, with the node and ssh's exit status."""

    def __init__(self, process: subprocess.Popen[str], node: Node, lost: Lost) -> None:
        self.process, self.node, self.released = process, node, False
        threading.Thread(target=self._watch, args=(lost,), daemon=True).start()

    def _watch(self, lost: Lost) -> None:
        status = self.process.wait()
        if not self.released:
            lost(self.node, f"its SSH session ended (exit {status})")

    def release(self) -> None:
        self.released = True
        _end(self.process)


Lost = Callable[[Node, str], None]


class ClusterLock:
    """One run's hold on its cluster: the lock on every distinct machine, taken in machine
    order; LOST hears of a session that ended before its release."""

    def __init__(
        self,
        inventory: Inventory,
        config: Path,
        holder: Holder,
        lost: Lost,
        lock_dir: str = LOCK_DIR,
    ) -> None:
        self.inventory, self.config, self.holder = inventory, config, holder
        self.lost, self.lock_dir = lost, lock_dir
        self.held: list[HeldLock] = []

    def take(
        self, wait_s: float, ours_ok: bool = False, answer_s: float = ANSWER_S
    ) -> tuple[list[list[Node]], list[Node], Refusal | None]:
        """Take the lock on every machine (one this run holds already counts when OURS_OK):
        each machine's nodes (the one asked first) and the nodes SSH cannot reach, or the
        refusal. ANSWER_S: how long past the connect timeout a node may take to answer."""
        sessions = {n.name: self._request(n) for n in self.inventory.nodes}
        answers, unreachable, refusal = self._machines(sessions, answer_s)
        taken: list[HeldLock] = []
        machines = []
        deadline = time.monotonic() + wait_s
        for nodes in by_machine(answers).values():
            for other in nodes[1:]:
                _end(sessions[other.name])
            if refusal is not None:
                _end(sessions[nodes[0].name])
                continue
            refusal = self._take_one(nodes[0], sessions[nodes[0].name], deadline, ours_ok, taken)
            machines.append(nodes)
        if refusal:
            for held in taken:
                held.release()
            return [], unreachable, refusal
        self.held += taken
        return machines, unreachable, None

    def verify(self, answer_s: float = ANSWER_S) -> tuple[list[Node], Refusal | None]:
        """That this run holds the lock on every machine, asked of each node now, taking it
        again where it is free: the nodes where it was, or the refusal."""
        before = len(self.held)
        _, _, refusal = self.take(0, ours_ok=True, answer_s=answer_s)
        return [held.node for held in self.held[before:]], refusal

    def _request(self, node: Node) -> subprocess.Popen[str]:
        argv = ssh_command(self.config, node, lock_command(self.holder, self.lock_dir))
        pipe = subprocess.PIPE
        # a session of its own: a terminal's Ctrl-C must not end it before the teardown
        return subprocess.Popen(
            argv, stdin=pipe, stdout=pipe, stderr=pipe, text=True, start_new_session=True
        )

    def _machines(
        self, sessions: dict[str, subprocess.Popen[str]], answer_s: float
    ) -> tuple[list[tuple[Node, str]], list[Node], Refusal | None]:
        """Each node's machine key as its session said it; a node SSH cannot reach is left
        to the SSH tests; any other failure is the refusal."""
        deadline = time.monotonic() + self.inventory.thresholds.connect_timeout_s + answer_s
        answers: list[tuple[Node, str]] = []
        unreachable: list[Node] = []
        refusal = None
        for node in self.inventory.nodes:
            process = sessions[node.name]
            line = first_line(process, max(0.0, deadline - time.monotonic()))
            if line and line.startswith(f"{MACHINE} "):
                answers.append((node, line.split(" ", 1)[1]))
                continue
            status, stderr = ended(process, line)
            if status == SSH_FAILED:
                unreachable.append(node)
            elif refusal is None:
                refusal = Refusal(node, None, status, stderr)
        return answers, unreachable, refusal

    def _take_one(
        self,
        node: Node,
        process: subprocess.Popen[str],
        deadline: float,
        ours_ok: bool,
        taken: list[HeldLock],
    ) -> Refusal | None:
        wait_s = max(0.0, deadline - time.monotonic())
        try:
            assert process.stdin is not None
            process.stdin.write(f"take {wait_s:.3f}\n")
            process.stdin.flush()
        except OSError:
            pass  # it ended: its status says why
        line = first_line(process, wait_s + ANSWER_S)
        busy = parse_lock_reply(line) if line else None
        if line and busy is None:
            taken.append(HeldLock(process, node, self.lost))
            return None
        status, stderr = ended(process, line)
        holding = busy.holder.run_id if busy and busy.verified and busy.holder else None
        if ours_ok and holding == self.holder.run_id:
            return None
        return Refusal(node, busy, status, stderr)

    def release(self) -> None:
        for held in self.held:
            held.release()
        self.held = []


def _end(process: subprocess.Popen[str]) -> None:
    """Close the request's stdin (the node's shell ends, and the lock with it), then wait."""
    try:
        if process.stdin:
            process.stdin.close()
    except OSError:
        pass
    try:
        process.wait(timeout=RELEASE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def ended(process: subprocess.Popen[str], line: str | None) -> tuple[int | None, str]:
    """A request that did not answer as asked, ended (killed if it still runs): its status
    (None when it said nothing in time) and its stderr."""
    _end(process)
    # an empty answer too carries ssh's status (docs/deploy-and-inference.md#cluster-lock)
    return (process.returncode if line is not None else None), _stderr(process)


def first_line(process: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The process's next line of output ("" when it closed its output without one), or
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
