"""infergate.waiting: the one wait loop, on a fake clock (no sleeping, no timing flakes)."""

from __future__ import annotations

import pytest

from infergate.waiting import (
    CommandTimedOut,
    Deadline,
    WaitTimedOut,
    check_not_timed_out,
    retrying,
    wait_until,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def test_returns_the_probe_result_once_it_is_there() -> None:
    clock = FakeClock()
    answers = iter([(None, "starting"), (None, "loading"), ("up", "ready")])
    got = wait_until(
        lambda: next(answers),
        "the API",
        Deadline(10, "thresholds.x").start(clock),
        sleep=clock.sleep,
    )
    assert got == "up"
    assert clock.slept == [1.0, 1.0]


def test_timeout_names_what_the_last_state_and_the_key() -> None:
    clock = FakeClock()
    seen = iter(f"{n} of 2 ranks" for n in range(100))
    with pytest.raises(WaitTimedOut) as e:
        wait_until(
            lambda: (None, next(seen)),
            "every rank joined",
            Deadline(2.5, "thresholds.dist_init_timeout_s").start(clock),
            sleep=clock.sleep,
        )
    text = str(e.value)
    assert "every rank joined" in text
    assert "2.5 s (thresholds.dist_init_timeout_s)" in text
    assert "last seen: 3 of 2 ranks" in text  # probed at 0, 1, 2 and at the deadline itself
    assert clock.slept == [1.0, 1.0, 0.5]  # never sleeps past the deadline
    assert "raise thresholds.dist_init_timeout_s" in text


def test_a_probe_that_raises_ends_the_wait_at_once() -> None:
    def fatal() -> tuple[None, str]:
        raise RuntimeError("container exited 1")

    with pytest.raises(RuntimeError, match="exited 1"):
        wait_until(fatal, "x", Deadline(60, "k"), sleep=lambda s: None)


@pytest.mark.parametrize("status", [124, 137])
def test_timeouts_exit_is_named(status: int) -> None:
    with pytest.raises(CommandTimedOut) as e:
        check_not_timed_out(
            "node1 (10.0.0.1)", "the host probe", Deadline(30, "ssh.timeout_s"), status
        )
    assert "node1 (10.0.0.1)" in str(e.value)
    assert "30 s (ssh.timeout_s)" in str(e.value)


@pytest.mark.parametrize("status", [0, 1, 2, 125, 255])
def test_other_exits_are_not_timeouts(status: int) -> None:
    check_not_timed_out("node1", "x", Deadline(1, "k"), status)


def test_a_timeouts_remedy_leads_with_the_cause_and_what_to_look_at() -> None:
    with pytest.raises(CommandTimedOut) as e:
        check_not_timed_out(
            "node1 (10.0.0.1)", "the pings", Deadline(30, "k"), 124, look="`ip -s link`"
        )
    assert str(e.value).endswith(
        "\n    fix: the node is slow or something on it hangs: look at `ip -s link`; "
        "raise k if it is just slow"
    )


def test_retrying_waits_out_a_busy_error_and_names_the_last_one() -> None:
    clock = FakeClock()
    errors = iter([OSError(16, "Device or resource busy"), None])

    def remove() -> None:
        error = next(errors)
        if error:
            raise error

    assert (
        wait_until(retrying(remove), "removed", Deadline(5, "k").start(clock), sleep=clock.sleep)
        is True
    )
    with pytest.raises(WaitTimedOut, match=r"last seen: \[Errno 16\] busy\)"):
        wait_until(
            retrying(lambda: _raise(OSError(16, "busy"))),
            "removed",
            Deadline(1, "k").start(clock),
            sleep=clock.sleep,
        )
    with pytest.raises(ValueError, match="not an OSError"):  # any other error ends the wait
        wait_until(retrying(lambda: _raise(ValueError("not an OSError"))), "x", Deadline(1, "k"))


def _raise(error: Exception) -> None:
    raise error
