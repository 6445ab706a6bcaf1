"""One way to wait: a `Deadline` that knows the plan key (or constant) that sets it, and
`wait_until`, which polls a probe until it says done or the deadline passes.

A timeout is never silent: `WaitTimedOut` says what was awaited, the last state seen and the
key to raise; a remote command that `timeout` ended is `CommandTimedOut`, not empty output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# `timeout` exits 124 when it ended the command, 137 when the command needed its SIGKILL
TIMEOUT_EXITS = (124, 137)


@dataclass(frozen=True)
class Deadline:
    """Seconds to wait, and the plan key (or the named constant) that sets them."""

    seconds: float
    key: str

    def __str__(self) -> str:
        return f"{self.seconds:g} s ({self.key})"

    def start(self, clock: Callable[[], float] = time.monotonic) -> Clock:
        """This deadline, counting from now."""
        return Clock(self, clock(), clock)


@dataclass(frozen=True)
class Clock:
    """A deadline counting from a start."""

    deadline: Deadline
    started: float
    now: Callable[[], float] = time.monotonic

    def elapsed(self) -> float:
        return self.now() - self.started

    def left(self) -> float:
        return self.deadline.seconds - self.elapsed()

    def passed(self) -> bool:
        return self.left() <= 0


class WaitTimedOut(Exception):
    """WHAT did not happen within DEADLINE; LAST is the last state seen."""

    def __init__(self, what: str, deadline: Deadline, waited_s: float, last: str) -> None:
        self.what, self.deadline, self.waited_s, self.last = what, deadline, waited_s, last
        super().__init__(
            f"{what}: not within {deadline} (waited {waited_s:.1f} s; last seen: {last}); "
            f"raise {deadline.key} if it is just slow"
        )


def wait_until(
    probe: Callable[[], tuple[T | None, str]],
    what: str,
    deadline: Deadline | Clock,
    every_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call PROBE, which returns (result or None, the state it saw), until it gives a result;
    the last call is made at the deadline, never after it, then `WaitTimedOut` names the last
    state. PROBE may raise to end the wait at once (a fatal line, a dead container)."""
    clock = deadline if isinstance(deadline, Clock) else deadline.start()
    while True:
        result, last = probe()
        if result is not None:
            return result
        left = clock.left()
        if left <= 0:
            raise WaitTimedOut(what, clock.deadline, clock.elapsed(), last)
        sleep(min(every_s, left))


def retrying(
    action: Callable[[], object], errors: tuple[type[Exception], ...] = (OSError,)
) -> Callable[[], tuple[bool | None, str]]:
    """A probe for `wait_until` that runs ACTION: done once it returns, not yet while it
    raises one of ERRORS (a directory still busy), whose words are the last state seen."""

    def probe() -> tuple[bool | None, str]:
        try:
            action()
        except errors as e:
            return None, str(e)
        return True, "done"

    return probe


# Where to look on a node whose command ran past its deadline: its load, and what is stuck
# in state D (waiting on a disk or a mount that does not answer)
LOOK_AT = (
    "`uptime` for its load, then what waits on a disk or a mount: "
    "`ps -eo pid,stat,wchan:32,etime,args | grep -E '^ *[0-9]+ D'`"
)


def ran_past(what: str, limit: Deadline, status: int, look: str = LOOK_AT) -> str:
    """The words for a command that `timeout` ended: what ran, the limit with its key, and a
    remedy that leads with the cause (a slow node, or something on it that hangs)."""
    return (
        f"{what} ran past its {limit} and was ended (exit {status}): what it printed is "
        f"partial\n    fix: the node is slow or something on it hangs: look at {look}; "
        f"raise {limit.key} if it is just slow"
    )


class CommandTimedOut(Exception):
    """A command on a node that its deadline ended."""

    def __init__(
        self, where: str, what: str, limit: Deadline, status: int, look: str = LOOK_AT
    ) -> None:
        self.where, self.what, self.limit, self.status = where, what, limit, status
        self.look = look
        super().__init__(f"{where}: {ran_past(what, limit, status, look)}")

    def __reduce__(self) -> tuple[type[CommandTimedOut], tuple[str, str, Deadline, int, str]]:
        """Pickled with what made it (xdist workers share what one of them read, failures
        included): Exception's own pickle would call it with the message alone."""
        return type(self), (self.where, self.what, self.limit, self.status, self.look)


def check_not_timed_out(
    where: str, what: str, limit: Deadline, status: int, look: str = LOOK_AT
) -> None:
    """Raise `CommandTimedOut` when STATUS is `timeout`'s own exit: its output is partial,
    and must not be read as "no output" or "section missing". LOOK names what to look at on
    the node first."""
    if status in TIMEOUT_EXITS:
        raise CommandTimedOut(where, what, limit, status, look)
