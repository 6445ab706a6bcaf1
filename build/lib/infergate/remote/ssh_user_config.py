"""The operator's own ssh_config, which the suite's ssh_config Includes: named by the
operator (--ssh-user-config, $INFERGATE_SSH_CONFIG, else ~/.ssh/config), never by the plan,
and read only if this user alone controls it. ssh runs a `Match exec` command while it
parses a file, before any connection (docs/internals.md#ssh-config).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from infergate.remote.ssh_config import (
    GLOB,
    UNSAFE,
    USER_CONFIG_ENV,
    USER_CONFIG_OPTION,
    SshSetupError,
)


def operator_ssh_config(given: str | None, plan: Path | None = None) -> Path | None:
    """The operator's own ssh_config: GIVEN (--ssh-user-config), else $INFERGATE_SSH_CONFIG,
    else ~/.ssh/config where it exists (`~`: $HOME); None for `none`. Refused, naming where it
    came from, unless a regular file of this user's that no one else may write, not PLAN."""
    env = os.environ.get(USER_CONFIG_ENV)
    source, value = (
        (USER_CONFIG_OPTION, given)
        if given is not None
        else (f"${USER_CONFIG_ENV}", env)
        if env is not None
        else (f"{USER_CONFIG_OPTION} (default)", "~/.ssh/config")
    )
    if value == "none":
        return None
    path = Path(value).expanduser().absolute()
    said = f"{source} {value[:200]!r}"
    if not value or UNSAFE.search(str(path)) or GLOB.search(str(path)):
        raise SshSetupError(
            f"{said}: not a path an Include reads whole (empty, or {str(path)[:200]!r} holds a "
            "control character, a double quote, or *, ? or [)\n    fix: a path without them, "
            "or none"
        )
    if given is None and env is None and not path.exists():
        return None
    _refuse_unsafe(path, said, plan)
    return path


def _refuse_unsafe(path: Path, said: str, plan: Path | None) -> None:
    """ssh runs what the file says (`Match exec`, ProxyCommand) as this user: only a file
    that this user alone controls, never the plan (docs/internals.md#ssh-config)."""
    try:
        info = path.stat()
    except OSError as e:
        raise SshSetupError(f"{said}: {e.strerror}\n    fix: name a file, or none") from None
    problem = (
        "is not a regular file"
        if not stat.S_ISREG(info.st_mode)
        else f"belongs to uid {info.st_uid}, not this user ({os.getuid()})"
        if info.st_uid != os.getuid()
        else f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
        if info.st_mode & 0o022
        else "is the plan itself"
        if plan is not None and plan.exists() and path.samefile(plan)
        else None
    )
    if problem:
        raise SshSetupError(
            f"{said} {problem}: ssh runs the commands an ssh_config holds (Match exec)\n"
            f"    fix: `chmod go-w` a file of your own, or {USER_CONFIG_OPTION}=none"
        )
