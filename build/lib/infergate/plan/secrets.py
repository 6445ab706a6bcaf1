"""The plan's secrets (docs/internals.md#secrets), gathered in one place and taken out of
every text the suite keeps or prints; what the suite writes about a run is this user's alone.
Pure but for those two writers: the plan, the option and the environment are handed in.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from infergate.plan.apikey import engine_keys, redact, resolve_api_key

if TYPE_CHECKING:  # the model's parser reads secret names here: the model comes after
    from infergate.plan.model import Inventory

MIN_LENGTH = 4
# whole words only: PATH is not PAT, PWD not PW, MAX_TOKENS (a count) not TOKEN
_WORD = re.compile(
    r"^(\w*TOKEN|SECRETS?|PASS\w*|\w*KEYS?|PAT|\w*AUTH|CREDENTIALS?|COOKIES?|PW)$", re.IGNORECASE
)
# a URL's user and password: scheme://USER:PASSWORD@host
_URL_LOGIN = re.compile(r"[a-z][\w+.-]*://([^\s/:@]*:([^\s/@]+))@", re.IGNORECASE)


def is_secret_name(name: str, marked: Collection[str] = ()) -> bool:
    """Whether the variable (or flag) NAME holds a secret: by a word of its name, split at
    `_` or `-`, or by the plan."""
    words = re.split(r"[_-]", name)
    return name in marked or any(_WORD.match(word) for word in words if word)


def secret_values(env: Mapping[str, str], marked: Collection[str] = ()) -> list[str]:
    """The values of ENV's secret variables, and the logins in any of its URLs."""
    found = [v for k, v in env.items() if is_secret_name(k, marked)]
    found += [login for v in env.values() for login in url_logins(v)]
    return [v for v in found if len(v) >= MIN_LENGTH]


def url_logins(text: str) -> list[str]:
    """The `user:password` and the password of each URL in TEXT that carries them."""
    return [part for hit in _URL_LOGIN.finditer(text) for part in hit.groups()]


def flag_secrets(flags: Sequence[str]) -> list[str]:
    """The values of the secret flags (`--hf-token T`, `--api-key=K`, `--db-password P`:
    a word of the name, as is_secret_name reads it; vLLM's --api-key takes several), and
    the logins of every URL in the flags."""
    found, taking = [], False
    for flag in flags:
        if flag.startswith("-"):
            name, eq, value = flag.partition("=")
            secret = is_secret_name(name.lstrip("-"))
            taking = secret and not eq
            found += [value] if secret and eq else []
        elif taking:
            found.append(flag)
    return found + [login for flag in flags for login in url_logins(flag)]


def plan_secrets(
    inventory: Inventory | None,
    option: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, ...]:
    """Every secret of a run: the plan's (none with --endpoint alone), and the key the
    suite sends (the --api-key option, else INFERGATE_API_KEY or OPENAI_API_KEY)."""
    found = plan_values(inventory) if inventory else []
    flags = inventory.engine.flags if inventory else ()
    sent = resolve_api_key(option, environ or {}, flags, {})
    found += list(sent.secrets()) if sent else []
    return tuple(sorted({s for s in found if len(s) >= MIN_LENGTH}, key=len, reverse=True))


def plan_values(inventory: Inventory) -> list[str]:
    """The plan's own secrets: marked env values, as written and as resolved per node, and
    the engine's API keys."""
    marked = inventory.engine.secret_env
    found = secret_values(inventory.engine.env, marked)
    found += secret_values(docker_env(inventory.engine.docker_args), marked)
    found += flag_secrets(inventory.engine.flags)
    for node in inventory.nodes:
        env = inventory.node_env(node)
        found += secret_values({**node.env, **env}, marked)
        found += [k.value for k in engine_keys(inventory.engine.flags, env)]
    return found


def docker_env(args: Sequence[str]) -> dict[str, str]:
    """The variables that `-e K=V`, `--env K=V` or `--env=K=V` (or `-eK=V`, refused) in
    docker_args set, read from any list, one the plan refuses too: on the command line,
    where the plan put them, but hidden in every text all the same."""
    env: dict[str, str] = {}
    for i, word in enumerate(args):
        if word in ("-e", "--env"):
            given = args[i + 1] if i + 1 < len(args) else ""
        elif word.startswith(("--env=", "-e")):
            given = word.removeprefix("--env=").removeprefix("-e").removeprefix("=")
        else:
            continue
        name, eq, value = given.partition("=")
        env.update({name: value} if eq else {})
    return env


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


class PrivateFileError(OSError):
    """A report folder or file another user could read or change: named, never written."""


def private_dir(path: Path) -> Path:
    """PATH and each missing parent, made for this user alone (0700); a folder that was
    there is left as it is (run_folder checks the one the reports go in)."""
    for folder in reversed([p for p in (path, *path.parents) if not p.exists()]):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # another process of this run made it first
            continue
        folder.chmod(0o700)  # made here: the umask may have cut the mode
    return path


def run_folder(folder: Path) -> Path:
    """FOLDER, a run's report folder, made fresh (0700) in its parent, which is made where
    missing and else must be safe_parent; one another process of this run made is taken."""
    safe_parent(private_dir(folder.parent))
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        seen = folder.lstat()
        if not stat.S_ISDIR(seen.st_mode) or _not_mine(seen, 0o077):
            raise PrivateFileError(f"{folder}: there before this run, not made by it") from None
        return folder
    folder.chmod(0o700)  # made here: the umask may have cut the mode
    return folder


def safe_parent(folder: Path) -> None:
    """Raise PrivateFileError where FOLDER belongs to another user than this one or root,
    or where group or others may write in it without the sticky bit (docs/reports.md#folders)."""
    seen = folder.stat()
    me = os.geteuid()
    if not stat.S_ISDIR(seen.st_mode):
        raise PrivateFileError(f"{folder} is not a folder; choose a folder (or a new path)")
    if seen.st_uid not in (me, 0):
        raise PrivateFileError(
            f"{folder} belongs to uid {seen.st_uid}, expected yours ({me}) or root's: "
            "its owner could swap the reports; choose a folder of your own"
        )
    if seen.st_mode & 0o022 and not seen.st_mode & stat.S_ISVTX:
        mode = stat.S_IMODE(seen.st_mode)
        raise PrivateFileError(
            f"{folder} is writable by group or others without the sticky bit (mode "
            f"{mode:04o}), expected 0700 or a sticky folder such as /tmp (1777): another user "
            f"could plant links there; choose a folder of your own, or `chmod +t {folder}`"
        )


def open_private(path: Path, append: bool = False) -> int:
    """A descriptor to write PATH, for this user alone (0600), never through a link: a new
    file (O_CREAT | O_EXCL | O_NOFOLLOW); with APPEND also one this user made before."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if not append:
            raise
        fd = os.open(path, flags | os.O_APPEND)
        seen = os.fstat(fd)
        if not stat.S_ISREG(seen.st_mode) or _not_mine(seen, 0) or seen.st_nlink != 1:
            os.close(fd)
            raise PrivateFileError(f"{path}: not a file of this run's, left as it is") from None
    os.fchmod(fd, 0o600)  # this user's file: the umask, or an earlier write, may differ
    return fd


def write_private(path: Path, text: str, append: bool = False) -> None:
    """Write TEXT to PATH (a new file renamed over it: a link there is replaced, never
    followed), or append it, readable by this user alone: 0600."""
    new = path if append else path.with_name(f".{path.name}.{os.getpid()}.new")
    with os.fdopen(open_private(new, append), "w") as f:
        f.write(text)
    if new != path:
        os.replace(new, path)


def _not_mine(seen: os.stat_result, open_bits: int) -> bool:
    """Whether SEEN is another user's, or open to group or others by OPEN_BITS."""
    return seen.st_uid != os.geteuid() or bool(seen.st_mode & open_bits)
