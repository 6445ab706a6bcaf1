"""Server-sent events as OpenAI-compatible servers stream them: a pure parser and its judge.

Sample (vLLM chat with include_usage; each event one `data:` line, then a blank line):
``data: {...,"choices":[{"index":0,"delta":{"content":" Paris"},...,"finish_reason":null}]}``
``data: {...,"choices":[],"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}``
``data: [DONE]``
The whole stream: docs/deploy-and-inference.md#an-sse-stream.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from infergate.problems import Problem

DONE = "[DONE]"
# SSE ends lines with CRLF, LF or CR, and nothing else: str.splitlines would also split on
# U+2028, which a server may send raw inside a JSON string
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Event:
    """One SSE event: its `data:` values joined by newlines, and the line it started on."""

    line: int  # 1-based
    data: str

    @property
    def done(self) -> bool:
        return self.data.strip() == DONE

    def chunk(self) -> dict[str, object] | None:
        """The event's JSON object, or None when it is [DONE], not JSON, or not an object."""
        try:
            found = json.loads(self.data)
        except ValueError:
            return None
        return found if isinstance(found, dict) else None


@dataclass
class EventSplitter:
    """Assembles events from lines fed one at a time, as a client reads them off the wire:
    `data: x` and `data:x` both carry `x` (the spec drops one space); `: ping` is a comment;
    any other non-blank line is kept in `stray` with its line number."""

    lines: int = 0
    stray: list[tuple[int, str]] = field(default_factory=list)
    _data: list[str] = field(default_factory=list)
    _start: int = 0

    def feed(self, line: str) -> Event | None:
        """Take one line (without its ending); return the event a blank line completes."""
        self.lines += 1
        if not line:
            return self.flush()
        if line.startswith("data:"):
            value = line[5:]
            self._start = self._start or self.lines
            self._data.append(value[1:] if value.startswith(" ") else value)
        elif not line.startswith(":"):
            self.stray.append((self.lines, line))
        return None

    def flush(self) -> Event | None:
        """The event in progress, if any (at a blank line, or when the stream ends)."""
        if not self._data:
            return None
        event = Event(self._start, "\n".join(self._data))
        self._data, self._start = [], 0
        return event


def parse_events(raw: str) -> tuple[list[Event], list[tuple[int, str]]]:
    """Every event of a whole stream's text, and its stray lines (number, text)."""
    splitter = EventSplitter()
    events = [e for line in _LINE_END.split(raw) if (e := splitter.feed(line))]
    last = splitter.flush()  # a final event without its blank line still counts, as for vLLM
    return ([*events, last] if last else events), splitter.stray


def chunk_texts(chunk: Mapping[str, object]) -> tuple[str, str]:
    """The generated text and reasoning text a chunk carries, over all its choices; reasoning
    is `reasoning_content`, which vLLM renamed `reasoning` (vLLM pull 27752) and SGLang keeps.

    Sample: chat ``{"delta":{"content":" Paris"}}``, completions ``{"text":" Paris"}``
    """
    text, reasoning = [], []
    for choice in _choices(chunk):
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        text += [t for t in (delta.get("content"), choice.get("text")) if isinstance(t, str)]
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str):
                reasoning.append(delta[key])
                break  # servers in transition send both names with the same text
    return "".join(text), "".join(reasoning)


def finish_reason(chunk: Mapping[str, object]) -> str | None:
    """The chunk's `choices[].finish_reason` (`"stop"`, `"length"`), or None while streaming."""
    reasons = [c["finish_reason"] for c in _choices(chunk) if c.get("finish_reason")]
    return str(reasons[-1]) if reasons else None


def _choices(chunk: Mapping[str, object]) -> list[dict[str, object]]:
    choices = chunk.get("choices")
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


_PROXY_REMEDY = (
    "compare with the engine's own port, bypassing any proxy: `curl -sN "
    "http://HEAD:PORT/v1/chat/completions -H 'Content-Type: application/json' -d "
    '\'{"model":"MODEL","messages":[{"role":"user","content":"hi"}],"stream":true,'
    '"stream_options":{"include_usage":true}}\'`; a proxy must not buffer or rewrite SSE '
    "(nginx: proxy_buffering off)"
)


def framing_problems(raw: str, *, usage_expected: bool = True) -> list[Problem]:
    """What an OpenAI client would trip on in a stream's text, one problem per kind."""
    events, stray = parse_events(raw)
    done_at = next((i for i, e in enumerate(events) if e.done), None)
    body = events if done_at is None else events[:done_at]
    bad_json = [e for e in body if e.chunk() is None]
    problems = []
    if stray:
        problems.append(_stray(stray))
    if bad_json:
        problems.append(_bad_json(bad_json))
    if done_at is None:
        problems.append(_no_done(events))
    elif done_at + 1 < len(events):
        problems.append(_after_done(events[done_at + 1 :]))
    if usage_expected and not any(isinstance((e.chunk() or {}).get("usage"), dict) for e in body):
        problems.append(_no_usage())
    return problems


def _stray(stray: list[tuple[int, str]]) -> Problem:
    line, text = stray[0]
    return Problem(
        found=f"{len(stray)} line(s) that are neither `data:`, `:` comment nor blank, "
        f"first at line {line}: {text[:80]!r}",
        planned="only `data:` lines, comments and blank lines between events",
        remedy=_PROXY_REMEDY,
    )


def _bad_json(bad: list[Event]) -> Problem:
    return Problem(
        found=f"{len(bad)} event(s) whose data is not a JSON object, first at line "
        f"{bad[0].line}: {bad[0].data[:80]!r}",
        planned="every event before [DONE] one JSON chunk",
        remedy=_PROXY_REMEDY,
    )


def _no_done(events: list[Event]) -> Problem:
    return Problem(
        found=f"the stream ended after {len(events)} event(s) without `data: [DONE]`",
        planned="`data: [DONE]` as the last event",
        remedy="the stream was cut: look for an error in the engine log at that time, and "
        "for a proxy read timeout; " + _PROXY_REMEDY,
    )


def _after_done(after: list[Event]) -> Problem:
    return Problem(
        found=f"{len(after)} event(s) after `data: [DONE]`, first at line {after[0].line}",
        planned="nothing after `data: [DONE]` (clients stop reading there)",
        remedy=_PROXY_REMEDY,
    )


def _no_usage() -> Problem:
    return Problem(
        found="no chunk with `usage` although the request set stream_options.include_usage",
        planned="a final chunk with `choices: []` and `usage.completion_tokens`",
        remedy="the engine (or a proxy) dropped stream_options: run an engine version that "
        "honours it, or " + _PROXY_REMEDY,
    )
