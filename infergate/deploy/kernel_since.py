"""What one node's kernel said in the last seconds: the kernel-log section's lines (Xid, NVRM,
AER, mlx5, links: infergate.checks.kernel_log) and its OOM kills, kept by their timestamps,
with the node's uptime, so that a node that rebooted meanwhile says so (a Spark head that a
131K prefill reset: dgx-spark-playbooks#97)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from infergate.checks.kernel_log import KERNEL_LOG, KernelLog, parse_kernel_log
from infergate.deploy.evidence import KERNEL_OOM

OOM_MARK = "@@ oom"
# the uptime first; the log in a subshell, as it may `exit`; then the OOM lines
KERNEL_SINCE = f"cut -d' ' -f1 /proc/uptime\n( {KERNEL_LOG} )\necho '{OOM_MARK}'\n{KERNEL_OOM}\n"
SLACK_S = 1.0  # the controller's clock and the node's uptime read a moment apart
_STAMP = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")  # dmesg's, and journalctl -o short-monotonic's


@dataclass(frozen=True)
class KernelSince:
    uptime_s: float
    log: KernelLog
    oom: tuple[str, ...]


def parse_kernel_since(text: str) -> KernelSince:
    """KERNEL_SINCE's output: the uptime's line, the kernel-log section, `@@ oom`, the OOM
    lines.

    Sample: ``9178.63`` / ``source|dmesg`` / ``@@ oom`` /
    ``[ 5120.4] Out of memory: Killed process 4711 (python3) total-vm:...``
    """
    first, _, rest = text.partition("\n")
    log, _, oom = rest.partition(f"{OOM_MARK}\n")
    try:
        uptime = float(first.strip())
    except ValueError:
        uptime = -1.0
    lines = tuple(line for line in oom.splitlines() if line.strip())
    return KernelSince(uptime, parse_kernel_log(log), lines)


def kernel_news(found: KernelSince, ran_s: float) -> str:
    """What the kernel said in the last RAN_S seconds, in a phrase: nothing, its lines, that
    the log cannot be read (and why), or that the node rebooted meanwhile."""
    if 0 <= found.uptime_s < ran_s:
        return f"rebooted meanwhile: up {found.uptime_s:.0f} s, the rung ran {ran_s:.0f} s"
    if found.log.unreadable:
        return f"unreadable: {found.log.unreadable[:300]}"
    since = found.uptime_s - ran_s - SLACK_S
    kept = [ln for ln in dict.fromkeys((*found.log.lines, *found.oom)) if _at(ln) >= since]
    lines = sorted(kept, key=_at)
    if not lines:
        return "nothing"
    return f"{len(lines)} line(s), the last: {' '.join(lines[-1].split())[:240]}"


def _at(line: str) -> float:
    match = _STAMP.match(line.strip())
    return float(match[1]) if match else -1.0
