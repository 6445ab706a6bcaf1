"""GPUs under load (the full tier): every GPU of every node runs bf16 matmuls at once for
thresholds.gpu_load_s, and holds its clocks without heat, hardware slowdown, a power brake or
an Xid; GPUs of one model stay within the plan's clock spread; DCGM's diagnostic passes where
a node has it."""

import pytest

from infergate.checks.dcgm import ABSENT, judge_dcgm
from infergate.checks.facts import ProbeError, gpus_of
from infergate.checks.gpu import check_gpu_count
from infergate.checks.gpu_load import check_load_spread
from infergate.fixtures.facts import settled
from infergate.fixtures.report import fail_on, fail_on_nodes
from infergate.preflight.gpu_load import load_problems

pytestmark = [pytest.mark.gpu, pytest.mark.xdist_group("cluster")]


def test_gpus_hold_clocks_under_load(gpu_load, probes, node):
    """Each GPU ran the load, never held back by heat, hardware slowdown or a power brake (the
    SW power cap a loaded GPU rides is normal), and the kernel logged no Xid meanwhile."""
    _planned_gpus_seen(probes, node)
    fail_on(node, load_problems(gpu_load))


def test_gpu_clocks_alike_under_load(gpu_loads, answered, inventory):
    """GPUs of one model on every node hold a median SM clock under load within
    thresholds.gpu_load_clock_spread_pct of the fastest: the slowest paces every collective."""
    runs = {n.name: settled(gpu_loads[n.name]) for n in answered}
    loads = {name: run.load for name, run in runs.items() if run.load is not None}
    spread = inventory.thresholds.gpu_load_clock_spread_pct
    fail_on_nodes(answered, check_load_spread(loads, spread))


def test_dcgm_diag_passes(gpu_loads, node, inventory):
    """Where a node has dcgmi, `dcgmi diag -r thresholds.dcgm_diag_level` passes every test."""
    level = int(inventory.thresholds.dcgm_diag_level)
    dcgm = settled(gpu_loads[node.name]).dcgm
    if dcgm is None:
        pytest.skip("thresholds.dcgm_diag_level is 0: DCGM's diagnostic is not run")
    if dcgm.text.strip() == ABSENT:
        pytest.skip(f"{node.where} has no dcgmi (DCGM): its diagnostic is not run")
    fail_on(node, judge_dcgm(dcgm.text, dcgm.rc, level))


def _planned_gpus_seen(probes, node):
    """A node whose nvidia-smi fails or shows fewer GPUs than planned fails the count check
    alone: one cause, one red."""
    try:
        short = check_gpu_count(gpus_of(settled(probes.of(node))), node.gpus, node.key_of("gpus"))
    except ProbeError as e:
        short = [e]
    if short:
        pytest.skip(
            f"not checked: {node.where} does not show its planned GPUs "
            f"(test_gpus_present_as_planned[{node.name}])"
        )
