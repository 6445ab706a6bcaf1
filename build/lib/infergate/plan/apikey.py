"""The API key the suite sends with every HTTP call, resolved in one place, and the judge of
an endpoint that refuses the suite. First found wins: the `--api-key` option,
INFERGATE_API_KEY, OPENAI_API_KEY, the plan's own key, all handed in. `ApiKey` never shows
its value.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from infergate.problems import Problem

OPTION = "--api-key"
ENV_VARS = ("INFERGATE_API_KEY", "OPENAI_API_KEY")
ENGINE_FLAGS = ("--api-key", "--api_key")  # vLLM reads either spelling; SGLang the first
ENGINE_ENV = "VLLM_API_KEY"
HIDDEN = "[secret hidden]"  # no XML or HTML special characters: JUnit and report.html keep it
WHERE = (
    f"`{OPTION} KEY`, or {ENV_VARS[0]} (or {ENV_VARS[1]}) in the environment, or in the plan "
    f"as `--api-key KEY` in engine.flags or {ENGINE_ENV} in engine.env"
)


@dataclass(frozen=True)
class ApiKey:
    """A bearer token and where it came from; its repr never shows it."""

    value: str = field(repr=False)
    source: str  # "--api-key", "INFERGATE_API_KEY", ..., "engine.flags --api-key"
    # the keys of later sources that differ from this one: hidden too, named in a remedy
    shadowed: tuple[ApiKey, ...] = ()

    def header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.value}"}

    def secrets(self) -> tuple[str, ...]:
        return (self.value, *(k.value for k in self.shadowed))


def engine_keys(
    flags: Sequence[str], env: Mapping[str, str], env_key: str = f"engine.env.{ENGINE_ENV}"
) -> list[ApiKey]:
    """The keys the plan serves with: `--api-key K [K2 ...]` or `--api-key=K` in the flags
    (vLLM takes several), then VLLM_API_KEY in the head's environment, which the plan holds
    at ENV_KEY (the head's own `nodes[0].env.VLLM_API_KEY` where it sets it)."""
    found = [ApiKey(v, f"engine.flags {OPTION}") for v in _flag_values(flags)]
    if env.get(ENGINE_ENV):
        found.append(ApiKey(env[ENGINE_ENV], env_key))
    return found


def _flag_values(flags: Sequence[str]) -> list[str]:
    return _split_flags(flags)[1]


def _split_flags(flags: Sequence[str]) -> tuple[list[str], list[str]]:
    """The flags without the key flags, and the keys those flags give."""
    kept: list[str] = []
    keys: list[str] = []
    taking = False
    for flag in flags:
        name, eq, value = flag.partition("=")
        if name in ENGINE_FLAGS:
            taking = not eq
            keys += [value] if value else []
        elif taking and not flag.startswith("-"):
            keys.append(flag)
        else:
            taking = False
            kept.append(flag)
    return kept, keys


def resolve_api_key(
    option: str | None,
    environ: Mapping[str, str],
    flags: Sequence[str],
    env: Mapping[str, str],
    env_key: str = f"engine.env.{ENGINE_ENV}",
) -> ApiKey | None:
    """The key to send: the option, else INFERGATE_API_KEY, else OPENAI_API_KEY, else the
    plan's engine key; None when none is given (an empty value counts as none)."""
    given = [ApiKey(option or "", OPTION), *(ApiKey(environ.get(v, ""), v) for v in ENV_VARS)]
    found = [k for k in given if k.value] + engine_keys(flags, env, env_key)
    if not found:
        return None
    first = found[0]
    others = tuple(k for k in found[1:] if k.value != first.value)
    return ApiKey(first.value, first.source, others)


def flags_without_key(flags: Sequence[str]) -> tuple[str, ...]:
    """The flags with every `--api-key` and its values left out: what identifies a
    deployment (a baseline's key) is not its secret."""
    return tuple(_split_flags(flags)[0])


def redact(text: str, secrets: Sequence[str]) -> str:
    """TEXT with every secret replaced by a marker, in each form a text shows it in."""
    forms = {form for secret in secrets if secret for form in secret_forms(secret)}
    for form in sorted(forms, key=len, reverse=True):  # a key inside a longer one
        text = text.replace(form, HIDDEN)
    return text


@lru_cache(maxsize=256)
def secret_forms(secret: str) -> frozenset[str]:
    """SECRET as it is and as each serialiser escapes it: JSON (ASCII or not), a repr (in
    either quote, or ascii()), HTML (docs/reports.md#secrets)."""
    in_json = (json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1])
    # a repr quotes with ' and escapes ' where the whole text holds both quotes
    in_repr = (repr(secret)[1:-1], repr(secret + "'\"")[1:-4], ascii(secret)[1:-1])
    in_html = (html.escape(secret), html.escape(secret, quote=False))
    return frozenset((secret, *in_json, *in_repr, *in_html))


def redact_data(value: Any, secrets: Sequence[str]) -> Any:
    """VALUE (JSON-like: dicts, lists, strings) with the secrets out of every string and
    key, before it is serialised: no escaping can show one then."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, list | tuple):
        return [redact_data(v, secrets) for v in value]
    if isinstance(value, dict):
        return {redact_data(k, secrets): redact_data(v, secrets) for k, v in value.items()}
    return value


def check_authorized(status: int, url: str, key: ApiKey | None) -> list[Problem]:
    """401 or 403: the endpoint refuses the suite, with no key or with the key it sent;
    the remedy says where to give one (never the key)."""
    if status not in (401, 403):
        return []
    planned = "an endpoint the suite can read (HTTP 200 with the key it sends)"
    if key is None:
        found = f"HTTP {status} from {url} with no API key sent: the engine wants a key"
        return [Problem(found, planned, f"give the key the engine serves with: {WHERE}")]
    found = f"HTTP {status} from {url}: the engine rejected the API key sent (from {key.source})"
    remedy = f"give the key the engine serves with: {WHERE}"
    if key.shadowed:
        other = ", ".join(k.source for k in key.shadowed)
        verb = "leave out" if key.source == OPTION else "unset"
        remedy += f"; it overrides a different key from {other}: {verb} {key.source} to send that"
    return [Problem(found, planned, remedy)]
