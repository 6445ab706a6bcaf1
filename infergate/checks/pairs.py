"""Which node sends to which, and when: every ordered pair of nodes, or a seeded sample of
them, in steps where no node is in two streams at once (docs/checks.md#rail-bandwidth).

The pairs come from a round-robin tournament (the circle method): each round matches every
node with one peer, and the rounds together match every pair once. A round is measured as
two steps, one direction each, so a shaper on one side cannot slow the other direction's
stream by queueing its ACKs. Past a plan-set size, a seeded choice of rounds stands in for
the whole tournament: each round still covers every node, in both directions.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

Pair = tuple[str, str]  # (sender, receiver)


def tournament(names: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Rounds in which every two nodes meet once and no node meets two at a time; with an
    odd count, one node sits each round out."""
    seats: list[str | None] = [*names, *([None] if len(names) % 2 else [])]
    rounds = []
    for _ in range(len(seats) - 1):
        half = len(seats) // 2
        met = zip(seats[:half], reversed(seats[half:]), strict=True)
        rounds.append([(a, b) for a, b in met if a is not None and b is not None])
        seats = [seats[0], seats[-1], *seats[1:-1]]  # the first sits, the rest turn one seat
    return rounds


@dataclass(frozen=True)
class Schedule:
    """The steps to run in order; each step's streams run at once, on distinct nodes."""

    steps: list[list[Pair]]
    sampled: bool  # False: every ordered pair is in a step
    rounds: int  # the tournament's rounds taken
    of_rounds: int  # the whole tournament's

    @property
    def streams(self) -> int:
        return sum(len(step) for step in self.steps)


def schedule(names: Sequence[str], all_up_to: int, sample_rounds: int, seed: int) -> Schedule:
    """Every ordered pair up to ALL_UP_TO nodes; past it, SAMPLE_ROUNDS rounds of a tournament
    over the nodes in a SEED-shuffled order (one more for an odd count: each node then sits
    one round out, and still meets two peers)."""
    order, rng = list(names), random.Random(seed)
    if len(order) > all_up_to:
        rng.shuffle(order)
    rounds = tournament(order)
    taken = rounds
    if len(order) > all_up_to and sample_rounds + len(order) % 2 < len(rounds):
        taken = sorted(rng.sample(rounds, sample_rounds + len(order) % 2), key=rounds.index)
    steps = [step for pairs in taken for step in ([*pairs], [(b, a) for a, b in pairs])]
    return Schedule(steps, len(taken) < len(rounds), len(taken), len(rounds))
