"""Readers for the plan values that land in a command line or an ssh_config.

Each accepts only its own grammar, so that a value can never become an option (`-` first),
a second config line (a newline) or a second command (docs/internals.md#value-grammars).
"""

from __future__ import annotations

import re

from infergate.plan.values import (
    CONTROLS,
    MAX_TEXT,
    NODE_NAME_RE,
    InventoryError,
    argument,
    described,
    host,
    matching,
    text,
)

# Docker's reference grammar (distribution/reference, regexp.go), ASCII as in Go
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"\w[\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_IMAGE_REF_RE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)
_NAME_LIMIT = 255  # distribution/reference's NameTotalLengthMax

# POSIX's portable user names (no '-' first), within useradd's 32 characters
_USER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,31}")
_JUMP_RE = re.compile(r"(?:(?P<user>[^@]*)@)?(?P<host>\[[^\]]*\]|[^:@\[\]]*)(?::(?P<port>.*))?")
_PORT_RE = re.compile(r"[0-9]{1,5}")


def image_ref(value: object, path: str) -> str:
    """A Docker image reference: [registry[:port]/]name[:tag][@digest]."""
    found = argument(value, path)
    match = _IMAGE_REF_RE.fullmatch(found)
    if not match:
        raise InventoryError(
            path,
            f"{found!r} is not a Docker image reference like "
            "nvcr.io/nvidia/vllm:26.05-py3 (lower-case name, then :tag and/or @sha256:digest)",
        )
    if len(match["name"]) > _NAME_LIMIT:
        raise InventoryError(path, f"the image name is over {_NAME_LIMIT} characters")
    return found


described(image_ref, pattern=f"^(?:{_IMAGE_REF_RE.pattern.replace('(?P<name>', '(?:')})$")


user_name = matching(_USER_RE, "a user name (letters, digits, '.', '_', '-'; no '-' first)")
hca_name = matching(
    re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(?::[0-9]{1,3})?"),
    "an RDMA device name like mlx5_0 or rocep1s0f1 (maybe with :port)",
)


def ssh_path(value: object, path: str) -> str:
    """A file that ssh reads (its key, its known_hosts): one line that ssh_config can quote."""
    found = argument(value, path)
    if '"' in found or "\\" in found:
        raise InventoryError(path, f"{found!r} holds '\"' or '\\', which ssh_config cannot quote")
    return found


described(ssh_path, pattern=f'^(?!-)[^"\\\\{CONTROLS}]*$', minLength=1, maxLength=MAX_TEXT)


def ssh_include(value: object, path: str) -> bool:
    """nodes[].ssh.config: false (or `none`) stops ssh reading the operator's own ssh_config;
    true, the default, reads it. A file is the operator's to name (--ssh-user-config): ssh
    runs a `Match exec` line while it parses one (docs/internals.md#ssh-config)."""
    if value is None or value is False or value in ("", "none"):
        return False
    if value is True:
        return True
    raise InventoryError(
        path,
        f"{str(value)[:80]!r}: a plan may only turn the operator's ssh_config off (false); "
        "the file is named by the operator, with --ssh-user-config or $INFERGATE_SSH_CONFIG "
        "(ssh runs any `Match exec` command in a file it reads)",
    )


def jump(value: object, path: str) -> str:
    """nodes[].ssh.jump: a node of this plan (checked with the whole plan) or [user@]host[:port]."""
    found = text(value, path)
    if NODE_NAME_RE.fullmatch(found):
        return found
    try:
        _host_port(found, path)
    except InventoryError as e:
        raise InventoryError(
            path, f"{found!r} is neither a node name nor [user@]host[:port] ({e.message})"
        ) from None
    return found


# a node name, or [user@]host[:port]: never '-' first (an option of ssh), never a space
described(jump, pattern=f"^(?!-)[^\\s{CONTROLS}]*$", minLength=1, maxLength=MAX_TEXT)


def _host_port(found: str, path: str) -> None:
    match = _JUMP_RE.fullmatch(found)
    if not match:
        raise InventoryError(path, "more than one '@' or ':'")
    if match["user"] is not None:
        user_name(match["user"], path)
    host(match["host"].removeprefix("[").removesuffix("]"), path)
    port = match["port"]
    if port is not None and not (_PORT_RE.fullmatch(port) and 1 <= int(port) <= 65535):
        raise InventoryError(path, f"the port {port!r} is not one of 1-65535")
