"""Memory parsers and judge on recorded outputs (sources: selftest/data/README.md)."""

from pathlib import Path

import pytest

from infergate.checks.memory import (
    GIB,
    CgroupMemory,
    MemoryFacts,
    check_memory_available,
    memory_facts,
    parse_cgroup_memory,
    parse_meminfo,
)
from infergate.checks.probe import parse_sections

DATA = Path(__file__).parents[1] / "data"


def test_meminfo_gb10_idle_matches_public_report():
    fields = parse_meminfo((DATA / "gb10/meminfo-idle.txt").read_text())
    assert fields == {"MemTotal": 127600748 * 1024, "MemAvailable": 118566368 * 1024}


def test_meminfo_h200_host():
    fields = parse_meminfo((DATA / "h200/meminfo-head.txt").read_text())
    assert fields["MemAvailable"] == 263432964 * 1024
    assert fields["Cached"] == 943828 * 1024


def test_cgroup_v1_walk_without_limits_bounds_nothing():
    sections = parse_sections((DATA / "controller/probe-debian12-docker-down.txt").read_text())
    facts = memory_facts(sections["meminfo"].text, sections["cgroup-memory"].text)
    assert [c.path for c in facts.cgroups][-1] == "/"
    assert all(c.limit is None for c in facts.cgroups)  # 9223372036854771712: v1's "no limit"
    assert facts.usable == facts.available


def test_cgroup_v2_max_is_no_limit():
    (level,) = parse_cgroup_memory("/system.slice/sshd.service max 1048576 0")
    assert level.limit is None


def test_gb10_spark_has_room_for_its_half_of_the_seeds_model():
    facts = memory_facts((DATA / "gb10/meminfo-idle.txt").read_text(), "")
    # 118.5 GiB / 2 + 20 KV + 10 headroom = 89.25 GiB needed; an idle Spark has ~113 GiB
    assert check_memory_available(facts, 89.25) == []


def test_gb10_with_leftover_container_is_short_and_says_how_to_find_it():
    idle = memory_facts((DATA / "gb10/meminfo-idle.txt").read_text(), "")
    held = MemoryFacts(idle.total, idle.available - 30 * GIB)  # the report's leftover, and more
    (problem,) = check_memory_available(held, 89.25)
    assert problem.found.startswith("83.1 GiB usable (MemAvailable 83.1 GiB")
    assert "at least 89.2 GiB" in problem.planned
    assert "docker ps" in problem.remedy


def test_cgroup_limit_bounds_usable_and_is_named():
    cg = CgroupMemory("/infergate-lab/node1", 6 * GIB, 5 * GIB, GIB // 2)
    facts = MemoryFacts(24 * GIB, 20 * GIB, (cg,))
    assert facts.usable == int(1.5 * GIB)
    (problem,) = check_memory_available(facts, 3.0)
    assert "bounded by cgroup /infergate-lab/node1: limit 6.0 GiB, in use 5.0 GiB" in problem.found


def test_a_file_cache_read_above_the_usage_never_gives_more_than_the_limit():
    """As a CI run read node2 of the lab while a container read the 2.9 GB SGLang image: the
    file cache, read after the usage, 0.7 GB above it; the node showed 6.7 GiB usable under
    a 6 GiB limit and unbalanced the other node, which the balance check then blamed."""
    cg = CgroupMemory("/infergate-lab/node2", 6 * GIB, 3 * GIB, int(3.7 * GIB))
    assert cg.headroom == 6 * GIB
    assert MemoryFacts(24 * GIB, 20 * GIB, (cg,)).usable == 6 * GIB


@pytest.mark.parametrize("text", ["", "MemTotal: 1 kB"])
def test_meminfo_without_available_is_an_error(text):
    with pytest.raises(ValueError, match="MemAvailable"):
        memory_facts(text, "")
