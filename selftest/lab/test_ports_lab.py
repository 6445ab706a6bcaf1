"""The ports on every node and after the rendezvous, against the real lab: each fault
injected for real turns exactly its test red, naming the node (green: test_preflight_lab's
healthy runs, which run these tests too)."""

from __future__ import annotations

import pytest

from selftest.lab.test_preflight_lab import (
    AFTER,
    DIST_INIT,
    HOST_ONLY,
    NODES,
    PORTS,
    RAILS,
    with_plan,
)
from selftest.suite import run_suite

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]

RANGE = "test_ports.py::test_engine_ports_outside_ephemeral_range"


def with_vllm_port(tmp_path, port: str):
    return with_plan(tmp_path, lambda p: p["engine"]["env"].update(VLLM_PORT=port))


def test_taken_vllm_port_on_the_worker_names_the_worker_and_holder(engine_lab, pytester, tmp_path):
    engine_lab.apply_fault("port-taken", "node2", "29600")
    run = run_suite(pytester, *HOST_ONLY, inventory=with_vllm_port(tmp_path, "29600"))
    assert run.red() == {PORTS}, run.output
    text = run.message(PORTS)
    assert "node2 (10.251.0.12)" in text
    assert "node1 (" not in text  # node1 binds 29600 too: free there
    assert "TCP 29600 (VLLM_PORT) already taken on 0.0.0.0 by " in text
    assert '"python3",pid=' in text
    assert "or move the port in the plan (engine.env.VLLM_PORT)" in text


def test_plan_port_in_the_ephemeral_range_is_a_warning_on_every_node(
    engine_lab, pytester, tmp_path
):
    """A warn-severity check: the cluster still serves, so the run is green and its verdict
    says READY with the warning, its code and fix, once per node."""
    run = run_suite(pytester, *HOST_ONLY, inventory=with_vllm_port(tmp_path, "40000"))
    assert run.red() == set(), run.output
    assert {run.outcomes[f"{RANGE}[{n}]"].status for n in NODES} == {"passed"}
    verdict = run.output.partition("infergate: verdict")[2]
    assert "READY: no check failed, 2 warning(s)" in verdict, verdict
    for where in ("node1 (10.251.0.11)", "node2 (10.251.0.12)"):
        assert f"{where}\n  warn IG-PORT-EPHEMERAL found TCP 40000 (VLLM_PORT" in verdict
    assert "inside the ephemeral port range 32768-60999 and not reserved" in verdict
    assert "sysctl -w net.ipv4.ip_local_reserved_ports=40000" in verdict


def test_firewall_after_the_rendezvous_names_the_node_and_its_rule(engine_lab, pytester):
    engine_lab.apply_fault("firewall-after-rendezvous", "node2", "29501")
    run = run_suite(pytester, *HOST_ONLY)
    # the dist-init port still answers; the TCP rail into node2 cannot open either
    assert run.red() == {AFTER, RAILS}, run.output
    assert "no stream from node1 to node2 over 10.252.0.11 -> 10.252.0.12 (TCP)" in (
        run.message(RAILS)
    )
    assert DIST_INIT in run.outcomes
    text = run.message(AFTER)
    assert "node2 (10.251.0.12)" in text
    assert "node1 (" not in text
    assert "10.252.0.12 does not answer on ports used after the rendezvous, from node1: TCP " in (
        text
    )
    assert "(ephemeral range 32768-60999) TimeoutError" in text
    rule = "-A INPUT -i fab0 -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j DROP"
    assert f"iptables drops/rejects with `{rule}`" in text
