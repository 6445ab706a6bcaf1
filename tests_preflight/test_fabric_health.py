"""The fabric's health: the kernel log since boot, the RDMA ports' counters, rate and PCIe
link, and what each rail carries node to node."""

import pytest

from infergate.checks.bandwidth import check_rails
from infergate.checks.facts import kernel_log_of, rdma_ports_of
from infergate.checks.kernel_log import check_kernel_log
from infergate.checks.rdma import planned_ports
from infergate.checks.rdma_health import check_rdma_health
from infergate.checks.rdma_sysfs import rdma_plan
from infergate.fixtures.facts import read_fact
from infergate.fixtures.report import fail_on, fail_on_nodes


def test_kernel_log_clean_since_boot(probes, node, inventory):
    """Since boot the node's kernel logged no uncorrectable PCIe AER error, no mlx5 error, and
    no fabric link (the interface or a planned HCA's netdev) going down once it was up."""
    log = read_fact(node, probes.of(node), kernel_log_of)
    if log.unreadable:
        pytest.skip(f"the kernel log is unknown: {log.unreadable}")
    fail_on(node, check_kernel_log(log, _fabric_netdevs(probes, node, inventory)))


def _fabric_netdevs(probes, node, inventory):
    """The fabric interface, then each planned HCA port's netdevs, each named once."""
    plan = rdma_plan(node, inventory.node_env(node))
    ports = planned_ports(read_fact(node, probes.of(node), rdma_ports_of), plan)
    return list(dict.fromkeys([plan.interface, *(n for p in ports for n in p.netdevs)]))


def test_rdma_ports_error_free_at_planned_rate(probes, node, inventory):
    """Every planned HCA port that is up counts no link errors, links at fabric.rate_gbps or
    more, and its HCA's PCIe link trained at the speed and width it can."""
    plan = rdma_plan(node, inventory.node_env(node))
    if not plan.names_hcas:
        pytest.skip(
            f"the plan names no HCA for this node: {plan.hcas_key} and NCCL_IB_HCA are empty"
        )
    ports = read_fact(node, probes.of(node), rdma_ports_of)
    fail_on(node, check_rdma_health(ports, plan, inventory.fabric.rate_gbps))


@pytest.mark.xdist_group("cluster")
def test_fabric_rails_carry_planned_bandwidth(rails, inventory):
    """Every node sends to every peer (past fabric.all_pairs_up_to nodes, a seeded sample),
    one stream per node at a time, over every rail at fabric.min_gbps or more."""
    problems = check_rails(rails.measured, rails.min_gbps, rails.key)
    fail_on_nodes(inventory.nodes, problems, rails.header(len(inventory.nodes)))
