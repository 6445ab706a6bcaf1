"""The kernel log since boot, read once per node for the fabric and the GPU checks: PCIe AER
errors, mlx5 (ConnectX) errors, and the fabric's links going down once they were up, judged
here; NVRM/Xid lines, judged by infergate.checks.gpu_kernel. Read without permission the log
is unknown, never clean: the section names the permission missing (docs/checks.md#kernel-log).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from infergate.problems import Problem

# The last lines of each kind (the fabric's, the GPUs') the node sends back: a tail per kind
# keeps one storm of thousands from pushing out the other (docs/checks.md#kernel-log)
KEEP_LINES = 400

# The fabric's lines, and journalctl's words for a log it may not show; lower case, matched
# against each line in lower case (grep -i)
FABRIC_WORDS = (
    "aer|pcie bus error|mlx5|link (is )?(up|down)|"
    "insufficient permissions|not seeing messages|no journal files"
)

# dmesg, else `journalctl -k -b`; the first line names the reader, so an unreadable log names
# the missing permission; one awk keeps both tails in one pass (docs/checks.md#kernel-log)
KERNEL_LOG = rf"""
r=; {{ read -r r </proc/sys/kernel/dmesg_restrict; }} 2>/dev/null
set -f; set -- $(id -Gn); IFS=,
printf 'user\t%s\t%s\t%s\n' "$(id -un)" "$*" "${{r:-?}}"; unset IFS
if log=$(dmesg 2>&1); then src=dmesg
else
  printf 'failed\tdmesg\t%s\n' "${{log%%
*}}"
  if log=$(journalctl -k -b -o short-monotonic --no-pager 2>&1); then src=journalctl
  else printf 'failed\tjournalctl\t%s\n' "${{log##*
}}"; exit 0; fi
fi
printf 'source\t%s\n' "$src"
printf '%s\n' "$log" | awk -v keep={KEEP_LINES} '
  /NVRM|Xid/ {{ gpu[ng++ % keep] = $0; next }}
  tolower($0) ~ /{FABRIC_WORDS}/ {{ fabric[nf++ % keep] = $0 }}
  function tail(lines, n,   i) {{
    for (i = (n > keep ? n - keep : 0); i < n; i++) print lines[i % keep]
  }}
  END {{ tail(fabric, nf); tail(gpu, ng) }}'
"""


@dataclass(frozen=True)
class KernelLog:
    """The matching lines, oldest first within each kind, and their `source` ("dmesg" or
    "journalctl"); else `unreadable`: why neither could be read, naming the permission."""

    source: str
    lines: tuple[str, ...]
    unreadable: str


def parse_kernel_log(text: str) -> KernelLog:
    """Parse the `kernel-log` probe section: a `user` line (name, groups, dmesg_restrict),
    `failed` lines for a reader that was refused, `source`, then the matching log lines.

    Sample lines (tabs shown as `|`):
    ``user|ubuntu|ubuntu,sudo|1``
    ``failed|dmesg|dmesg: read kernel buffer failed: Operation not permitted``
    ``source|dmesg``
    ``[   39.290479] pcieport 0001:00:00.0: AER: Uncorrectable (Fatal) error message received from 0001:00:00.0``
    ``[    3.444931] NVRM: Persistence mode is deprecated and will be removed in a future release.``
    """  # noqa: E501
    head: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in filter(None, text.splitlines()):
        kind, _, rest = line.partition("\t")
        if kind in ("user", "failed", "source") and not lines:
            head.setdefault(kind, []).append(rest)
        else:
            lines.append(line)
    source = head.get("source", [""])[0]
    refused = [f for f in lines if _REFUSED.search(f)]
    if source and not refused:
        return KernelLog(source, tuple(lines), "")
    user = head.get("user", ["?\t?\t?"])[0].split("\t")
    said = [f.partition("\t")[2] for f in head.get("failed", [])] + refused[:1]
    return KernelLog("", (), _missing_permission(user, said))


# journalctl's words for a journal this user may not read, or that has no files to read
_REFUSED = re.compile(r"insufficient permissions|not seeing messages|No journal files", re.I)


def _missing_permission(user: list[str], said: list[str]) -> str:
    name, groups, restrict = [*user, "?", "?", "?"][:3]
    quoted = "; ".join(f"`{s.strip()}`" for s in said if s.strip()) or "nothing read"
    ring = f"kernel.dmesg_restrict={restrict}" + (" and no CAP_SYSLOG" if restrict == "1" else "")
    if any("not found" in s for s in said):
        journal = "no journalctl on the node"
    elif any("No journal files" in s for s in said):
        journal = "it has no files"
    else:
        journal = f"groups {groups}: neither adm nor systemd-journal"
    neither = f"the kernel ring buffer ({ring}) nor the journal ({journal})"
    grant = f"`sudo usermod -aG adm {name}`" if name != "?" else "`sudo usermod -aG adm USER`"
    return (
        f"{quoted}: {name} may read neither {neither}; to let the gate read it: {grant} "
        "(the journal), or `sudo sysctl kernel.dmesg_restrict=0` (the ring buffer)"
    )


@dataclass(frozen=True)
class Finding:
    what: str
    lines: tuple[str, ...]
    remedy: str


# both of the kernel's wordings, `Uncorrected (Fatal)` and `Uncorrectable (Non-Fatal)`; the
# link retries a corrected error itself (docs/checks.md#kernel-log)
_AER_UNCORRECTED = re.compile(r"(AER|PCIe Bus Error).*Uncorrect")
# the driver's own messages, not a line that names it (a boot command line may)
_MLX5_ERROR = re.compile(
    r"^(?:\[[^\]]*\]\s*)?(?:\S+ kernel: )?mlx5_\w+ .*"
    r"(health compromised|timeout|failed|fatal|not responding|err_detected|slot_reset)",
    re.IGNORECASE,
)
_LINK = re.compile(r"\s(\S+): (?:NIC )?Link (?:is )?(Up|Down)\b", re.IGNORECASE)


def kernel_log_findings(log: KernelLog, netdevs: Sequence[str]) -> list[Finding]:
    """Uncorrectable AER errors, mlx5 errors, and each of NETDEVS that went down after it had
    been up (a link training at boot logs down before up: that is no flap)."""
    aer = tuple(line for line in log.lines if _AER_UNCORRECTED.search(line))
    mlx5 = tuple(line for line in log.lines if _MLX5_ERROR.search(line))
    found = [
        Finding("uncorrectable PCIe AER error", aer, _AER_REMEDY),
        Finding("mlx5 error", mlx5, _MLX5_REMEDY),
    ]
    found += [
        Finding(f"{dev} link down after up", _flaps(log.lines, dev), _link_remedy(dev))
        for dev in netdevs
    ]
    return [f for f in found if f.lines]


def _flaps(lines: Sequence[str], netdev: str) -> tuple[str, ...]:
    up, flaps = False, []
    for line in lines:
        match = _LINK.search(line)
        if not match or match[1] != netdev:
            continue
        if match[2].lower() == "up":
            up = True
        elif up:
            flaps.append(line)
    return tuple(flaps)


def check_kernel_log(log: KernelLog, netdevs: Sequence[str]) -> list[Problem]:
    """One problem per kind of finding, with how many lines and the last one; the remedy
    leads with what the finding points at."""
    return [_problem(f) for f in kernel_log_findings(log, netdevs)]


def _problem(finding: Finding) -> Problem:
    last = " ".join(finding.lines[-1].split())[:240]
    count = len(finding.lines)
    return Problem(
        found=f"{count} {finding.what} line(s) in the kernel log since boot, the last: {last}",
        planned="no uncorrectable AER, no mlx5 error, no fabric link down since boot",
        remedy=finding.remedy,
    )


_AER_REMEDY = (
    "reboot the node before a run (a device that took an uncorrectable AER is reset or gone: "
    "`sudo lspci -vv | grep -e LnkSta -e UESta`), then reseat the card or update its firmware "
    "if it returns (`sudo journalctl -k -b -1 | grep -i aer` shows the boot before)"
)
_MLX5_REMEDY = (
    "the ConnectX firmware or its PCIe link failed: reboot the node (or `sudo mlxfwreset -d "
    "BDF reset`), then `sudo mlxfwmanager --query` for its firmware; a repeat is a hardware case"
)


def _link_remedy(netdev: str) -> str:
    show = shlex.join(["ip", "-s", "link", "show", netdev])
    return (
        f"the link dropped while up: check the cable and both ends (`{show}`, "
        f"`sudo ethtool {netdev}` on both nodes), and whether something took it down "
        "(`sudo journalctl -b -u NetworkManager -u systemd-networkd`)"
    )
