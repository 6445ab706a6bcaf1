"""The plan's secrets (docs/internals.md#secrets), gathered in one place and taken out of
every text the suite keeps or prints; what the suite writes about a run is this user's alone.
Pure but for those two writers: the plan, the option and the environment are handed in.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from infergate.plan.apikey import engine_keys, redact, resolve_api_key
from infergate.plan.docker_args import parse_docker_args

if TYPE_CHECKING:  # the model's parser reads secret names here: the model comes after
    from infergate.plan.model import Inventory

MIN_LENGTH = 4
_WORD = re.compile(r"^(TOKENS?|SECRETS?|PASS\w*|\w*KEYS?|\w*TOKEN)$", re.IGNORECASE)


def is_secret_name(name: str, marked: Collection[str] = ()) -> bool:
    """Whether the variable NAME holds a secret: by a word of its name, or by the plan."""
    return name in marked or any(_WORD.match(word) for word in name.split("_") if word)


def secret_values(env: Mapping[str, str], marked: Collection[str] = ()) -> list[str]:
    """The values of ENV's secret variables."""
    return [v for k, v in env.items() if is_secret_name(k, marked) and len(v) >= MIN_LENGTH]


def plan_secrets(
    inventory: Inventory, option: str | None = None, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """Every secret of a run: the secret env values of the engine and of every node (as
    written and as resolved for each node), the engine's API keys, and the key the suite
    sends (the --api-key option, else INFERGATE_API_KEY or OPENAI_API_KEY)."""
    marked = inventory.engine.secret_env
    found = secret_values(inventory.engine.env, marked)
    found += secret_values(docker_env(inventory.engine.docker_args), marked)
    for node in inventory.nodes:
        env = inventory.node_env(node)
        found += secret_values({**node.env, **env}, marked)
        found += [k.value for k in engine_keys(inventory.engine.flags, env)]
    sent = resolve_api_key(option, environ or {}, inventory.engine.flags, {})
    found += list(sent.secrets()) if sent else []
    return tuple(sorted({s for s in found if len(s) >= MIN_LENGTH}, key=len, reverse=True))


def docker_env(args: Sequence[str]) -> dict[str, str]:
    """The variables that `-e K=V`, `--env K=V` or `--env=K=V` in docker_args set: on the
    command line, where the plan put them, but hidden in every text all the same."""
    return dict(parse_docker_args(args).get("environment", {}))


class RedactingFilter(logging.Filter):
    """A logging filter that takes the secrets out of each record's message (testinfra logs
    every command with its whole output at DEBUG)."""

    def __init__(self, secrets: Sequence[str]) -> None:
        super().__init__()
        self.secrets = tuple(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = redact(message, self.secrets)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


def private_dir(path: Path) -> Path:
    """PATH made for this user alone (0700), and so each parent it makes (reports/)."""
    for folder in reversed([p for p in (path, *path.parents) if not p.exists()]):
        folder.mkdir(mode=0o700, exist_ok=True)
    path.chmod(0o700)  # the mode also where PATH was there, or the umask cut it
    return path


def write_private(path: Path, text: str, append: bool = False) -> None:
    """Write (or append) TEXT to PATH, readable by this user alone: 0600."""
    mode = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, mode, 0o600)
    os.fchmod(fd, 0o600)  # a file that was there already, written before with other modes
    with os.fdopen(fd, "w") as f:
        f.write(text)
