"""GPU health before a launch: no throttling that is a fault, no clock or power setting left
behind, no memory errors, no Xid in the kernel log, NVML answering at the kernel module's
version; and the nodes' GPUs alike."""

import pytest

from infergate.checks.facts import gpu_health_of, kernel_log_of, nvml_versions_of
from infergate.checks.gpu_health import check_gpu_health, check_gpu_peers
from infergate.checks.gpu_kernel import check_kernel_gpu_log, check_nvml_mismatch
from infergate.fixtures.facts import every_node, read_fact, settled
from infergate.fixtures.report import fail_on, fail_on_nodes

pytestmark = pytest.mark.gpu


def test_gpus_healthy(probes, node):
    """Every GPU runs free of thermal and hardware slowdown (the power cap of a loaded GPU is
    normal), with no clock lock or power cap left behind, no uncorrected ECC error and no
    pending or failed row remap; what a GPU cannot report (GB10: ECC) is N/A in the summary."""
    fail_on(node, check_gpu_health(read_fact(node, probes.of(node), gpu_health_of)))


@pytest.mark.xdist_group("cluster")
def test_gpus_alike_across_nodes(probes, answered):
    """GPUs of one model have the same SM clock ceiling and power limit on every node: one
    capped node sets the pace of every collective."""
    health = every_node(probes, answered, gpu_health_of)
    fail_on_nodes(answered, check_gpu_peers(health))


def test_no_gpu_errors_in_kernel_log(probes, node):
    """No Xid and no fatal NVRM line (fallen off the bus, API mismatch) since boot; a kernel log
    the probe may not read is unknown, and the skip names the permission."""
    log = read_fact(node, probes.of(node), kernel_log_of)
    if log.unreadable:
        pytest.skip(f"the kernel log is unknown: {log.unreadable}")
    fail_on(node, check_kernel_gpu_log(log))


def test_nvml_matches_kernel_module(probes, node):
    """nvidia-smi initialises NVML: a driver upgraded without a reboot ("Driver/library version
    mismatch") is named, with the kernel module's and the library's versions."""
    smi, module, library = nvml_versions_of(settled(probes.of(node)))
    fail_on(node, check_nvml_mismatch(smi, module, library))
