"""A parity reference: a model's greedy answers to fixed prompts, each token with its logprob
and the top-k alternatives, recorded on a topology the operator trusts; and its file form,
`infergate-reference/1` (docs/parity.md#the-reference-file). Pure: text in, text out."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT = "infergate-reference/1"


@dataclass(frozen=True)
class Position:
    """One generated token: as the API returns it, its logprob, and the top-k (token, logprob)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Answer:
    """One prompt's greedy answer, token by token, and why it ended (stop or length)."""

    prompt: str
    positions: tuple[Position, ...]
    finish_reason: str = ""

    @property
    def text(self) -> str:
        return "".join(p.token for p in self.positions)


@dataclass(frozen=True)
class Topology:
    """Where a reference was recorded: the nodes, the parallelism, the image and the engine."""

    nodes: tuple[str, ...] = ()  # the plan's node names; none with --endpoint alone
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    image: str = ""  # the plan's image.id, else its ref
    engine_version: str = ""  # GET /version's, where the engine serves it
    endpoint: str = ""  # the host:port it was served from


@dataclass(frozen=True)
class Reference:
    model: str  # the served name the answers came from
    topology: Topology
    request: Mapping[str, object]  # the parameters each prompt was sent with, less the prompt
    answers: tuple[Answer, ...]
    recorded_at: str = ""  # ISO 8601
    extra: Mapping[str, object] = field(default_factory=dict)

    def answer_to(self, prompt: str) -> Answer | None:
        return next((a for a in self.answers if a.prompt == prompt), None)


def reference_text(ref: Reference) -> str:
    """The file's text: JSON, one key per line at the top, under its format."""
    data = {"format": FORMAT, **asdict(ref)}
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


class ReferenceError(ValueError):
    """A file that is no reference of this format; the message names what is wrong."""


def read_reference(text: str) -> Reference:
    """A reference file's text back into a Reference; ReferenceError where it is not one."""
    try:
        data: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReferenceError(f"not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ReferenceError(f"format {found!r}, expected {FORMAT!r}")
    try:
        return Reference(
            model=str(data["model"]),
            topology=Topology(**{**data["topology"], "nodes": tuple(data["topology"]["nodes"])}),
            request=dict(data["request"]),
            answers=tuple(_answer(a) for a in data["answers"]),
            recorded_at=str(data.get("recorded_at", "")),
            extra=dict(data.get("extra", {})),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ReferenceError(f"malformed: {type(e).__name__}: {e}") from None


def _answer(data: Mapping[str, Any]) -> Answer:
    positions = tuple(
        Position(
            str(p["token"]), float(p["logprob"]), tuple((str(t), float(lp)) for t, lp in p["top"])
        )
        for p in data["positions"]
    )
    return Answer(str(data["prompt"]), positions, str(data.get("finish_reason", "")))
