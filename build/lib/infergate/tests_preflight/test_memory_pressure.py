"""Memory pressure on unified memory (GB10): no swap in use, no tasks stalling on memory."""

import pytest

from infergate.checks.facts import gpus_of, pressure_of
from infergate.checks.gpu import MemorySource, memory_source
from infergate.checks.pressure import check_memory_pressure
from infergate.fixtures.facts import read_fact
from infergate.fixtures.report import fail_on


@pytest.mark.gpu
def test_no_memory_pressure_on_unified_memory(probes, node):
    """Where GPU and CPU share the memory, no swap is in use and PSI `some avg10` is at most
    10 % before the launch: an out-of-memory there freezes the whole node."""
    if memory_source(read_fact(node, probes.of(node), gpus_of)) is not MemorySource.MEMINFO:
        pytest.skip("the GPUs have memory of their own: swap and PSI are judged on unified memory")
    fail_on(node, check_memory_pressure(read_fact(node, probes.of(node), pressure_of)))
