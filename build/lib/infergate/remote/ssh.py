"""SSH to a node: every command under a deadline on the node and a local one that ends ssh,
and a node unreachable or hung once fails its later commands at once with the same words.
`open_remotes` yields a Remote per node through the run's ssh_config (a master per node).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn, TypeAlias, TypeVar

from infergate.plan.model import Inventory, Node
from infergate.remote.ssh_config import control_dir, exit_masters, plan_known_hosts, ssh_config
from infergate.remote.ssh_failure import check_ssh_failure
from infergate.waiting import LOOK_AT, TIMEOUT_EXITS, CommandTimedOut, Deadline

COMMAND_TIMEOUT_KEY = "thresholds.command_timeout_s"  # sets every command's deadline not given
KILL_AFTER_S = 2  # the node's `timeout -k`: SIGKILL this long after its deadline
SSH_GRACE_S = 2  # after the node's kill: ssh's own exit and the last bytes of output
# a process group just sent SIGKILL: only one in state D outlives this, and it is abandoned
REAP_AFTER_KILL_S = 5


class NodeUnreachable(Exception):
    """The node could not answer (SSH could not reach it, or it hung); the message names it
    and says what to do."""


class NodeCommandFailed(NodeUnreachable):
    """The node answered, but a command whose output was to be read failed: there is nothing
    to read, so, like a node that could not answer, it is an outcome of its own (the message
    names the node, what failed and what to do), and the other nodes are still read."""


class NodeHung(NodeUnreachable):
    """ssh did not return by the local deadline: something on the node outlived `timeout`."""


class NodeTimedOut(NodeUnreachable, CommandTimedOut):
    """The node's `timeout` ended a command whose output was to be read: what it printed is
    partial, so it is a finding of its own, not "no output" or "section missing". Unlike a
    hung node, the node's next command may well answer."""


class Remote:
    """A node's commands, each with a deadline on the node (`timeout`) and a local one that
    ends ssh should the node keep the session open. A node unreachable or hung once fails every
    later call at once with the same message (docs/internals.md#ssh-deadlines)."""

    def __init__(
        self, node: Node, config: Path | None, timeout_s: float, connect_timeout_s: float = 0
    ) -> None:
        self.node, self.config = node, config
        self.limit = Deadline(timeout_s, COMMAND_TIMEOUT_KEY)
        self.connect_timeout_s = connect_timeout_s if config else 0
        self._failed: NodeUnreachable | None = None
        self._lock = threading.Lock()

    def run(
        self,
        command: str,
        timeout_s: float | None = None,
        input: str | None = None,
        on_err: Callable[[str], None] | None = None,
    ) -> Ran:
        """Run a shell command on the node, `input` on its stdin (secrets go there, never
        into argv); `timeout` on the node ends it at the deadline, and ssh is killed locally
        a few seconds after that. ON_ERR, if given, is handed each stderr line as it comes."""
        limit = timeout_s or self.limit.seconds
        with self._lock:
            if self._failed:
                raise type(self._failed)(str(self._failed))
        wrapped = f"timeout -k {KILL_AFTER_S} {limit:g} sh -c {shlex.quote(command)}"
        deadline = limit + KILL_AFTER_S + self.connect_timeout_s + SSH_GRACE_S
        done = run_with_deadline(self._argv(wrapped), input, deadline, on_err)
        if done is None:
            self._fail(NodeHung(self._hung(command, limit, deadline)))
        rc, out, err = done
        if rc == 255 and self.config:  # ssh's own failure (as testinfra judged it too)
            self._fail(NodeUnreachable(self._explain(err)))
        return Ran(rc, out, err)

    def read(
        self,
        command: str,
        what: str,
        limit: Deadline | None = None,
        look: str = LOOK_AT,
        on_err: Callable[[str], None] | None = None,
    ) -> Ran:
        """`run` a command whose output is to be read, under LIMIT (the plan's command
        deadline if none): when the node's `timeout` ends it, NodeTimedOut names the node,
        WHAT ran, the limit with its key, and LOOK, what to look at on the node first."""
        limit = limit or self.limit
        done = self.run(command, limit.seconds, on_err=on_err)
        if done.exit_status in TIMEOUT_EXITS:
            raise NodeTimedOut(self.node.where, what, limit, done.exit_status, look)
        return done

    def _argv(self, wrapped: str) -> list[str]:
        if self.config is None:
            return ["sh", "-c", wrapped]
        return ["ssh", "-F", str(self.config), "-T", "--", self.node.name, wrapped]

    def _fail(self, error: NodeUnreachable) -> NoReturn:
        with self._lock:
            self._failed = self._failed or error
        raise type(error)(str(error))

    def _hung(self, command: str, limit: float, deadline: float) -> str:
        head = command.strip().splitlines()[0][:120] if command.strip() else ""
        return (
            f"{self.node.where} hung: ssh did not return within {deadline:g} s (the command's "
            f"{limit:g} s deadline, {KILL_AFTER_S} s for the node's kill, "
            f"{self.connect_timeout_s:g} s to connect, {SSH_GRACE_S} s grace), so a process "
            "that `timeout` could not end keeps the session open (state D on a hung NFS mount, "
            f"say); ssh was killed and this run sends the node nothing more. "
            f"The command began: {head}\n"
            "    fix: on the node, list processes in state D and the mounts they wait on: "
            "`ps -eo pid,stat,wchan:32,etime,args | grep -E '^ *[0-9]+ D'`, "
            "then `findmnt -t nfs,nfs4`"
        )

    def _explain(self, stderr: str) -> str:
        key = self.node.ssh.key
        readable = os.access(os.path.expanduser(key), os.R_OK) if key else None
        problem = check_ssh_failure(stderr, self.node, readable)
        return (
            f"{self.node.where} is unreachable over SSH: {problem.found}\n    fix: {problem.remedy}"
        )


def run_with_deadline(
    argv: list[str],
    input: str | None,
    deadline_s: float,
    on_err: Callable[[str], None] | None = None,
) -> tuple[int, str, str] | None:
    """(exit status, stdout, stderr) of argv, or None if it outlived the deadline: then its
    whole process group (it leads a new session) is killed, also on Ctrl-C or a backstop.
    ON_ERR: each stderr line as it comes (a long command's progress), read by a thread."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        data = input.encode() if input is not None else None
        out, err = _communicate(proc, data, deadline_s, on_err)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None
    except BaseException:
        _kill_group(proc)
        raise
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _communicate(
    proc: subprocess.Popen[bytes],
    data: bytes | None,
    deadline_s: float,
    on_err: Callable[[str], None] | None,
) -> tuple[bytes, bytes]:
    """`communicate`, with stderr read line by line by a thread of its own when ON_ERR is
    given (communicate reads only the pipes it is left)."""
    if on_err is None or proc.stderr is None:
        return proc.communicate(data, timeout=deadline_s)
    said: list[bytes] = []
    pump = threading.Thread(target=_pump, args=(proc.stderr, on_err, said), daemon=True)
    pump.start()
    err_pipe, proc.stderr = proc.stderr, None
    try:
        out, _ = proc.communicate(data, timeout=deadline_s)
    finally:
        proc.stderr = err_pipe  # closed by _kill_group should the deadline pass
    pump.join(REAP_AFTER_KILL_S)  # a holder of stderr outside the group: its lines are lost
    return out, b"".join(said)


def _pump(pipe: IO[bytes], on_err: Callable[[str], None], said: list[bytes]) -> None:
    with contextlib.suppress(ValueError, OSError):  # the pipe closed under it by a kill
        for raw in pipe:
            said.append(raw)
            on_err(raw.decode(errors="replace").rstrip("\n"))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=REAP_AFTER_KILL_S)
    # a holder outside the group keeps its end open: the output is abandoned, not waited for
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe:
            pipe.close()


def connections(node: Node, inventory: Inventory) -> int:
    """How many SSH connections reach the node: its own, and one per jump on the way (each
    may take the connect timeout)."""
    by_name = {n.name: n for n in inventory.nodes}
    count, jump = 1, node.ssh.jump
    while jump and count < 10:  # a loop of jumps is the plan parser's to refuse
        count += 1
        jump = by_name[jump].ssh.jump if jump in by_name else None
    return count


@dataclass(frozen=True)
class Ran:
    """A command's exit status and output, as the node gave them."""

    exit_status: int
    stdout: str
    stderr: str


T = TypeVar("T")
Outcome: TypeAlias = T | NodeUnreachable  # a node's answer, or why it could not give one


@contextlib.contextmanager
def open_remotes(
    inventory: Inventory, plan: Path, persist_s: int, user: Path | None
) -> Iterator[dict[str, Remote]]:
    """A Remote per node through the ssh_config written for this run (USER: the operator's
    own ssh_config); its masters outlive the run by PERSIST_S (the next run skips the key
    exchange), or end with it (0). SshConfigError names what cannot be written."""
    with tempfile.TemporaryDirectory(prefix="ig-ssh-") as tmp:
        config = Path(tmp, "ssh_config")
        masters = control_dir() if persist_s else Path(tmp)
        config.write_text(ssh_config(inventory, masters, persist_s, plan_known_hosts(plan), user))
        t = inventory.thresholds
        try:
            yield {
                n.name: Remote(
                    n,
                    None if n.ssh.connection == "local" else config,
                    t.command_timeout_s,
                    t.connect_timeout_s * connections(n, inventory),
                )
                for n in inventory.nodes
            }
        finally:
            if not persist_s:
                exit_masters(config, inventory.nodes)
