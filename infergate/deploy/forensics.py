"""Hang forensics: before a launch that missed a deadline is torn down, a `py-spy dump` of
every process of every node's engine container and each node's last log lines, kept under
evidence/NODE/; the failure gains a line per Python process naming where it waits.

py-spy runs on the node as root against the container's host pids (`docker top`), else
inside the container; the gate installs nothing. Without it, the line says how to install
it (docs/forensics.md).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence

from infergate.deploy.news import processes
from infergate.deploy.stacks import MARK, parse_py_spy_dump, rank_lines, split_dumps
from infergate.deploy.state import LaunchState
from infergate.plan.secrets import private_dir, write_private
from infergate.remote.fanout import each

DUMP_S = 15  # one dump: a non-blocking one reads a hung process in well under a second
NODE_S = 120.0  # all of a node's dumps: within the run's end budget (timeouts.AFTER_LAUNCH_S)
LAST_LINES = 50  # of each node's log, beside its stacks
NONE = "### no py-spy"  # the dump script's answer where it finds no py-spy
ON_HOST, INSIDE = "on the node", "in its container"  # where the dump ran
HOW = {
    ON_HOST: "py-spy ran on the node, as root, against the container's host pids (docker top)",
    INSIDE: "py-spy ran inside the container (docker exec) against its own pids",
}
INSTALL = (
    "install py-spy where the dump can run it: `sudo pip install py-spy` on the node "
    "(x86_64 and aarch64 wheels: a DGX Spark takes the same command; the dump needs root "
    "or ptrace, docs/forensics.md#what-a-node-needs), then launch again"
)
# $1 a py-spy command line prefix, then the pids; `--nonblocking`: a frozen target never
# stops the dump, and `timeout` bounds one that would wait anyway
DUMPS = f"""for p in "$@"; do echo "{MARK}$p"; timeout -k 2 {DUMP_S} $spy dump --nonblocking \
--pid "$p" 2>&1; done"""
HOST = f"""spy=$(command -v py-spy || ls "$HOME/.local/bin/py-spy" 2>/dev/null) || \
{{ echo '{NONE}'; exit 0; }}
[ "$(id -u)" = 0 ] || spy="sudo -n $spy"
{DUMPS}"""
CONTAINER = f"""spy=$(command -v py-spy) || {{ echo '{NONE}'; exit 0; }}
set -- $(cd /proc && ls -d [0-9]* | grep -vx "$$")
{DUMPS}"""


def take_stacks(s: LaunchState, when: str = "") -> list[str]:
    """Every started node's stacks and last log lines into the evidence, at once (WHEN, a
    request that hung after ready, names the files: stacks-WHEN.txt); the lines that say
    where each Python process waits (or why no stack was taken)."""
    found = each(s.started(), lambda node: node_stacks(s, node, when))
    return [line for lines in found.values() for line in lines]


def node_stacks(s: LaunchState, node: str, when: str = "") -> list[str]:
    """NODE's dumps, from the node, else from inside its container; kept and judged."""
    try:
        began = time.monotonic()
        pids = [p.pid for p in processes(s, node)]
        tried = [(ON_HOST, on_host(s, node, pids))]
        if not dumped(tried[0][1]):
            tried.append((INSIDE, in_container(s, node)))
        took = f"# {len(pids)} process(es) in {time.monotonic() - began:.1f} s\n"
        stacks = keep(s, node, took + "".join(f"# {HOW[how]}\n{t}" for how, t in tried), when)
    except Exception as e:  # the launch's own failure must still be told
        return [f"{s.where(node)}: no stacks taken: {s.hide(str(e))}"]
    dumps = [parse_py_spy_dump(pid, d) for pid, d in split_dumps(tried[-1][1]).items()]
    return rank_lines(s.where(node), dumps, stacks) or [no_stacks(s.where(node), tried)]


def on_host(s: LaunchState, node: str, pids: Sequence[int]) -> str:
    """The dump script on NODE itself, over its shell, for the container's host PIDS."""
    command = f"sh -c {shlex.quote(HOST)} sh {' '.join(str(p) for p in pids)}"
    return s.io(node, command, min(DUMP_S * (len(pids) + 1), NODE_S)).stdout


def in_container(s: LaunchState, node: str) -> str:
    """The dump script inside NODE's engine container, for every process there."""
    output = s.container(node).exec_run(["sh", "-c", CONTAINER]).output
    return s.hide(output.decode(errors="replace") if isinstance(output, bytes) else "")


def dumped(text: str) -> bool:
    """Whether the script dumped at least one Python process."""
    dumps = split_dumps(text)
    return any(not parse_py_spy_dump(pid, d).error for pid, d in dumps.items())


def keep(s: LaunchState, node: str, stacks: str, when: str = "") -> str:
    """NODE's stacks and last log lines in the evidence (stacks-WHEN.txt where WHEN is
    given); where the stacks are, to name."""
    if s.evidence is None:
        return "not kept (no evidence folder)"
    into, suffix = private_dir(s.evidence / node), f"-{when}" if when else ""
    write_private(into / f"stacks{suffix}.txt", stacks)
    lines = "\n".join(s.watches[node].last_lines(LAST_LINES))
    write_private(into / f"last-lines{suffix}.txt", lines)
    return f"{s.evidence.name}/{node}/stacks{suffix}.txt"


def no_stacks(where: str, tried: list[tuple[str, str]]) -> str:
    """Why no Python process of the node was dumped, wherever the dump was tried."""
    found = "; ".join(f"{how}: {said(text)}" for how, text in tried)
    return f"{where}: no stacks taken ({found}); {INSTALL}"


def said(text: str) -> str:
    """What one dump script found: no py-spy, or py-spy's errors (each once)."""
    if NONE in text:
        return "no py-spy"
    errors = {parse_py_spy_dump(pid, d).error for pid, d in split_dumps(text).items()}
    return ", ".join(sorted(e for e in errors if e))[:300] or "no process"
