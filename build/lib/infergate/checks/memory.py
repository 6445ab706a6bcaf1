"""Memory a node can give the engine: /proc/meminfo, bounded by the memory cgroup it runs in.

MemAvailable is the ground truth on unified memory too (GB10, where nvidia-smi reports none);
a cgroup's limit less what it already holds bounds it further (docs/checks.md#memory).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from infergate.plan.model import plan_key
from infergate.problems import Problem

# the keys of what a node's memory must hold, as Inventory.mem_needed_gib adds it up
NEED_KEYS = tuple(
    map(plan_key, ("model.size_gib", "thresholds.kv_cache_gib", "thresholds.memory_headroom_gib"))
)
NEED_SET_KEY = plan_key("thresholds.min_mem_available_gib")
RATIO_KEY = plan_key("thresholds.tp_balance_min_ratio")

GIB = 1024**3
# cgroup v1 reports "no limit" as a huge page-aligned number; v2 as "max".
_UNLIMITED = 2**62


@dataclass(frozen=True)
class CgroupMemory:
    """One level of the cgroup walk, in bytes: its limit (None: none at this level), usage, and
    the page cache (active + inactive file) the kernel reclaims before failing."""

    path: str
    limit: int | None
    usage: int
    file_cache: int

    @property
    def headroom(self) -> int | None:
        """The limit less what the cgroup holds and cannot reclaim; never more than the limit.
        The usage and the file cache are two reads: page cache charged between them (a
        container reading GBs of its image) can make the cache read larger than the usage."""
        if self.limit is None:
            return None
        return self.limit - max(0, self.usage - self.file_cache)


@dataclass(frozen=True)
class MemoryFacts:
    """MemTotal and MemAvailable in bytes, and the cgroup levels from the probe's shell up."""

    total: int
    available: int
    cgroups: tuple[CgroupMemory, ...] = ()

    @property
    def tightest_cgroup(self) -> CgroupMemory | None:
        limited = [c for c in self.cgroups if c.headroom is not None]
        return min(limited, key=lambda c: c.headroom or 0, default=None)

    @property
    def usable(self) -> int:
        """What a new process here can allocate: MemAvailable, or less under a cgroup limit."""
        cg = self.tightest_cgroup
        return self.available if cg is None else min(self.available, cg.headroom or 0)


def parse_meminfo(text: str) -> dict[str, int]:
    """Parse `cat /proc/meminfo` into bytes per field.

    Sample line: ``MemAvailable:   118566368 kB``
    """
    fields = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            scale = 1024 if parts[1:] == ["kB"] else 1
            fields[key.strip()] = int(parts[0]) * scale
    return fields


def parse_cgroup_memory(text: str) -> tuple[CgroupMemory, ...]:
    """Parse the probe's cgroup walk: one `path limit usage file_cache` line per level.

    Sample line (cgroup v1, no limit): ``/ 9223372036854771712 336912384 0``
    """
    levels = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4 or not parts[2].isdigit():
            continue
        limit = None if parts[1] == "max" or int(parts[1]) >= _UNLIMITED else int(parts[1])
        levels.append(CgroupMemory(parts[0], limit, int(parts[2]), int(parts[3])))
    return tuple(levels)


def memory_facts(meminfo: str, cgroup_walk: str) -> MemoryFacts:
    fields = parse_meminfo(meminfo)
    if "MemAvailable" not in fields or "MemTotal" not in fields:
        raise ValueError("no MemTotal/MemAvailable in /proc/meminfo (kernel older than 3.14?)")
    return MemoryFacts(fields["MemTotal"], fields["MemAvailable"], parse_cgroup_memory(cgroup_walk))


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def check_memory_available(facts: MemoryFacts, needed_gib: float) -> list[Problem]:
    """Enough memory for this node's share of the weights, the KV budget and headroom."""
    if facts.usable >= needed_gib * GIB:
        return []
    found = f"{gib(facts.usable)} usable (MemAvailable {gib(facts.available)}"
    cg = facts.tightest_cgroup
    bounded = cg is not None and facts.usable < facts.available
    if cg is not None and bounded:
        found += (
            f", bounded by cgroup {cg.path}: limit {gib(cg.limit or 0)}, in use {gib(cg.usage)}"
        )
    return [
        Problem(
            found=found + ")",
            planned=f"at least {needed_gib:.1f} GiB (the node's share of {' + '.join(NEED_KEYS)}"
            f", or {NEED_SET_KEY})",
            remedy=_cgroup_remedy(cg) if cg is not None and bounded else _HOST_REMEDY,
        )
    ]


_HOST_REMEDY = (
    "find what holds memory: `ps -eo pid,rss,comm --sort=-rss | head`, `docker ps` and "
    "`docker stats --no-stream`; stop leftovers, then `sync; echo 3 > /proc/sys/vm/drop_caches` "
    "for page cache"
)


def _cgroup_remedy(cg: CgroupMemory) -> str:
    """The cgroup's limit binds before the host's memory does: what runs inside it (its
    descendants too) is what to stop, and its limit what to raise."""
    held = gib(cg.usage - cg.file_cache)
    grep = shlex.join(["grep", "-F", cg.path])
    return (
        f"processes in cgroup {cg.path} hold {held} of its {gib(cg.limit or 0)} limit: list "
        f"them with `ps -eo pid,rss,cgroup,comm --sort=-rss | {grep} | head` and "
        "stop what the engine does not need, or raise that cgroup's limit (systemd: "
        "`systemctl set-property <unit> MemoryMax=...`; a container: its --memory)"
    )


def check_tp_balance(usable: dict[str, int], min_ratio: float) -> dict[str, list[Problem]]:
    """The least-provided node has at least `min_ratio` of the best-provided node's memory:
    SGLang refuses to start below 0.9 ("The memory capacity is unbalanced"), and vLLM sizes
    every rank's KV cache to the smallest (docs/notes.md#sizing)."""
    if len(usable) < 2:
        return {}
    best = max(usable, key=lambda n: usable[n])
    floor = usable[best] * min_ratio
    return {
        node: [
            Problem(
                found=f"{gib(free)} usable, {free / usable[best]:.2f} of "
                f"{best}'s {gib(usable[best])}",
                planned=f"at least {min_ratio:g} of the best node ({RATIO_KEY}; SGLang refuses "
                "to start below 0.9: 'memory capacity is unbalanced')",
                remedy="something on this node holds memory the others do not: stop it "
                "(`docker ps`, `nvidia-smi --query-compute-apps=pid,process_name,used_memory "
                "--format=csv`)",
            )
        ]
        for node, free in usable.items()
        if free < floor
    }
