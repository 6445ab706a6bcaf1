"""Free space where the engine writes: each file system holds what the plan puts on it, the
image where it is not loaded yet, the model where it must be copied, and room for what the
first launch compiles wherever a compile/JIT cache writes (docs/checks.md#disk-space).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from infergate.checks.disk import (
    DiskFacts,
    Mount,
    cache_dirs,
    container_plan,
    disk_section,
    host_path,
    parse_disk_section,
    written_paths,
)
from infergate.checks.facts import ProbeError, Sections, section_text
from infergate.checks.offline import hub_section, hub_target
from infergate.plan.docker_args import Volume
from infergate.plan.model import Inventory, Node
from infergate.problems import Problem

GIB = 2**30

# Free room for a first launch's JIT, on each file system a cache writes to: FlashInfer's cold
# JIT alone writes up to 2 GiB (flashinfer-ai/flashinfer#4035; docs/checks.md#disk-space)
JIT_HEADROOM_GIB = 4.0


@dataclass(frozen=True)
class Need:
    """What the engine puts at `path` on the host, and `why` (for JIT headroom: the caches it is
    for); `headroom` counts once per file system."""

    path: str
    gib: float
    why: str
    headroom: bool = False


def disk_of(sections: Sections) -> DiskFacts:
    """The Docker root, the image's size and the file system of every place the engine
    writes (the probe's `disk` section)."""
    try:
        return parse_disk_section(section_text(sections, "disk"))
    except ValueError as e:
        raise ProbeError(f"the disk section does not parse: {e}") from None


def cache_needs(env: Mapping[str, str], volumes: Sequence[Volume], root: str | None) -> list[Need]:
    """JIT headroom on each cache's file system: the host path a volume maps it to, else the
    Docker root (the container's own layer), which every container writes to in any case."""
    needs, in_layer = [], []
    for name, path in cache_dirs(env).items():
        mapped = host_path(path, volumes)
        if mapped is None:
            in_layer.append(name)
        else:
            needs.append(Need(mapped, JIT_HEADROOM_GIB, name, headroom=True))
    if root:
        layer = f"{', '.join(in_layer)} in the container's layer" if in_layer else "containers"
        needs.append(Need(root, JIT_HEADROOM_GIB, layer, headroom=True))
    return needs


def copy_needs(
    facts: DiskFacts, image_ref: str, image_gib: float | None, model: tuple[str, float | None]
) -> list[Need]:
    """The image where it is not on the node (the size a peer reports), and the model where
    its directory is missing (`model.size_gib`), each to be copied there."""
    needs = []
    if facts.docker_root and facts.image_bytes is None and image_gib:
        why = f"image {image_ref}, not on this node (`docker load` unpacks it here)"
        needs.append(Need(facts.docker_root, image_gib, why))
    path, size_gib = model
    if size_gib:
        needs.append(Need(path, size_gib, "model.size_gib, not on this node (copied here)"))
    return needs


def node_needs(
    inventory: Inventory,
    node: Node,
    facts: DiskFacts,
    image_gib: float | None,
    model_missing: bool,
) -> list[Need]:
    """Everything this node's engine writes, where (IMAGE_GIB: the size a peer reports)."""
    plan = container_plan(inventory.node_env(node), inventory.engine.docker_args)
    model = inventory.model
    copied = (model.path, model.size_gib if model_missing else None)
    return [
        *cache_needs(plan.env, plan.volumes, facts.docker_root),
        *copy_needs(facts, inventory.image.ref, image_gib, copied),
    ]


def check_disk_space(needs: Sequence[Need], facts: DiskFacts) -> list[Problem]:
    """Each file system has the room its needs add up to (JIT headroom once)."""
    by_fs: dict[Mount, list[Need]] = {}
    for need in needs:
        by_fs.setdefault(facts.mounts[need.path], []).append(need)
    return [p for mount, group in by_fs.items() if (p := _short(mount, group))]


def _short(mount: Mount, group: list[Need]) -> Problem | None:
    headroom = [n for n in group if n.headroom]
    copies = [n for n in group if not n.headroom]
    total = sum(n.gib for n in copies) + (JIT_HEADROOM_GIB if headroom else 0)
    if mount.avail is None or mount.avail / GIB >= total:
        return None
    paths = ", ".join(dict.fromkeys(n.path for n in group))
    whys = [f"{n.gib:g} GiB {n.why}" for n in copies]
    if headroom:
        whys.append(f"{JIT_HEADROOM_GIB:g} GiB JIT headroom ({'; '.join(n.why for n in headroom)})")
    target = mount.target or paths
    free = mount.avail / GIB
    fix = f"free {total - free:.1f} GiB on {target}: `du -xh -d 2 {target} | sort -h | tail`"
    fix += " shows what fills it"
    # the Docker root, which holds the image and the containers' layers
    if any("container" in n.why or "image" in n.why for n in group):
        fix += "; `docker system prune` removes stopped containers and unused images"
    if headroom:
        fix += "; or map the caches to a disk with room (`-v DIR:CACHE` in engine.docker_args)"
    return Problem(
        found=f"{free:.1f} GiB free on {target} ({mount.fstype} {mount.source}), "
        f"which holds {paths}",
        planned=f"at least {total:g} GiB free there: {'; '.join(whys)}",
        remedy=fix,
    )


def largest_image_gib(outcomes: Iterable[object]) -> float | None:
    """The planned image's size as the nodes that have it report it (probe sections; a node
    that could not be probed, or did not say, is left out): the room a node without it needs."""
    sizes = []
    for outcome in outcomes:
        if isinstance(outcome, dict):
            with contextlib.suppress(ProbeError):
                sizes.append(disk_of(outcome).image_bytes or 0)
    return max(sizes) / GIB if any(sizes) else None


def node_sections(inventory: Inventory, node: Node) -> tuple[tuple[str, str], ...]:
    """This node's own probe sections: the disk section over the places its engine writes, and
    the dial to the hub its env names."""
    plan = container_plan(inventory.node_env(node), inventory.engine.docker_args)
    paths = written_paths(plan, inventory.model.path)
    return (disk_section(inventory.image.ref, paths), hub_section(hub_target(plan.env)))
