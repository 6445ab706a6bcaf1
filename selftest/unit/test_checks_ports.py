"""The ports the engine binds on every node, the ephemeral range against them, and the ports
used after the rendezvous: judged on the shipped plans and on outputs recorded for real
(selftest/data/README.md, `ports/`)."""

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from infergate.checks.firewall import (
    Dial,
    Rules,
    check_after_rendezvous,
    check_listened,
    firewall_rules,
    parse_iptables_rules,
    parse_nft_rules,
    sample_ports,
)
from infergate.checks.node_ports import PortRange, check_outside_ephemeral_range, parse_port_range
from infergate.checks.ports import (
    check_listener,
    dial_command,
    listen_command,
    parse_dials,
    parse_listener,
)
from infergate.engines.ports import Bound
from infergate.engines.registry import engine_for
from infergate.plan.model import parse_inventory

DATA = Path(__file__).parents[1] / "data" / "ports"
INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
VLLM, RAY = engine_for("vllm"), engine_for("vllm-ray")


def plan(name: str, **env: str):
    data = yaml.safe_load((INVENTORIES / f"{name}.yaml").read_text())
    data["engine"].setdefault("env", {}).update(env)
    return parse_inventory(data)


def planned_ports(inventory, node):
    return engine_for(inventory).planned_ports(inventory, node)


def ports_of(inventory) -> dict[str, dict[int, str]]:
    return {
        n.name: {p: b.what for p, b in planned_ports(inventory, n).items()} for n in inventory.nodes
    }


def test_vllm_binds_api_and_rendezvous_on_the_head_only():
    assert ports_of(plan("lab")) == {
        "node1": {8000: "API server", 29501: "dist-init rendezvous"},
        "node2": {},
    }


def test_a_fixed_vllm_port_is_bound_on_every_node():
    seen = ports_of(plan("lab", VLLM_PORT="29600"))
    assert seen["node2"] == {29600: "VLLM_PORT"}
    assert seen["node1"][29600] == "VLLM_PORT"
    assert planned_ports(plan("lab", VLLM_PORT="29600"), plan("lab").nodes[1])[29600].key == (
        "engine.env.VLLM_PORT"
    )


def test_sglang_serves_health_on_its_port_on_every_rank():
    seen = ports_of(plan("two-sparks-sglang"))
    assert seen["spark2"] == {30000: "API server"}
    assert seen["spark1"] == {30000: "API server", 20000: "dist-init rendezvous"}


def test_ray_binds_its_defaults_and_gcs():
    seen = ports_of(plan("two-sparks-vllm-ray"))
    assert seen["spark2"] == {52365: "Ray dashboard agent"}
    assert seen["spark1"] == {
        52365: "Ray dashboard agent",
        10001: "Ray client server",
        8265: "Ray dashboard",
        8000: "API server",
        6379: "Ray GCS",
    }


# --- the ephemeral range ------------------------------------------------------------------


def lab_range() -> PortRange:
    """This machine's reading (the kernel's defaults), as the probe's section reads it."""
    return parse_port_range((DATA / "port-range-controller.txt").read_text())


def test_port_range_parses_the_kernels_defaults_and_reserved_lists():
    span = lab_range()
    assert (span.low, span.high, span.reserved) == (32768, 60999, frozenset())
    # the reserved form of the kernel's docs (Documentation/networking/ip-sysctl.rst)
    reserved = parse_port_range("32768\t60999\n8080,9148-9149\n").reserved
    assert reserved == {8080, 9148, 9149}


def test_a_plan_port_inside_the_ephemeral_range_is_named_with_the_reserve_command():
    inventory = plan("lab", VLLM_PORT="40000")
    planned = planned_ports(inventory, inventory.nodes[1])
    (problem,) = check_outside_ephemeral_range(lab_range(), planned)
    assert problem.found == (
        "TCP 40000 (VLLM_PORT, engine.env.VLLM_PORT) inside the ephemeral port range "
        "32768-60999 and not reserved"
    )
    assert problem.remedy.startswith("`sudo sysctl -w net.ipv4.ip_local_reserved_ports=40000`")


def test_a_reserved_port_keeps_the_others_in_the_command_and_passes_itself():
    span = PortRange(32768, 60999, frozenset({40000, 40001, 50000}))
    planned = {40000: Bound("VLLM_PORT", "k"), 45000: Bound("x", "k2")}
    (problem,) = check_outside_ephemeral_range(span, planned)
    assert "ip_local_reserved_ports=40000-40001,45000,50000`" in problem.remedy


def test_ray_defaults_in_the_range_are_not_the_plans_to_move():
    inventory = plan("two-sparks-vllm-ray")
    assert (
        check_outside_ephemeral_range(lab_range(), planned_ports(inventory, inventory.head)) == []
    )


def test_lab_ports_lie_below_the_range():
    inventory = plan("lab")
    assert (
        check_outside_ephemeral_range(lab_range(), planned_ports(inventory, inventory.head)) == []
    )


# --- sampling and the listener ------------------------------------------------------------


def test_sample_takes_each_ranges_ends_and_middle_around_what_is_held():
    sample = sample_ports(lab_range(), RAY.listen_spans, avoid={32768, 60999, 10002})
    assert sample == {
        32769: "ephemeral range 32768-60999",
        46883: "ephemeral range 32768-60999",
        60998: "ephemeral range 32768-60999",
        10003: "Ray worker ports 10002-19999",
        15000: "Ray worker ports 10002-19999",
        19999: "Ray worker ports 10002-19999",
    }
    assert set(sample_ports(lab_range(), VLLM.listen_spans, avoid=set())) == {32768, 46883, 60999}


def test_listener_report_names_bound_and_refused_ports():
    listener = parse_listener("error 8000 98 Address already in use\nlistening 4242 33000,46000\n")
    assert (listener.pid, listener.ports) == (4242, (33000, 46000))
    assert listener.refused == {8000: "98 Address already in use"}
    (problem,) = check_listener(parse_listener("error 29501 98 Address already in use\n"), 29501)
    assert problem.found == "cannot listen on TCP 29501: 98 Address already in use"
    assert check_listener(listener, 33000) == []
    (silent,) = check_listened((), {})
    assert silent.found == "no sampled port to listen on: (no answer)"


def sh(command: str) -> str:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=20).stdout


def test_listener_ends_by_itself_once_each_port_had_its_dials():
    """The real listener and dialler on this machine's loopback (port 0: any free port)."""
    listener = parse_listener(sh(listen_command([0, 0], ttl_s=20, dials=1)))
    assert listener.pid is not None, listener
    assert len(listener.ports) == 2, listener
    said = parse_dials(sh(dial_command([("127.0.0.1", p) for p in listener.ports], 3)))
    assert [said[("127.0.0.1", p)].split()[0] for p in listener.ports] == ["ok", "ok"]
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{listener.pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{listener.pid}"), "still listening after its dials"


def test_dials_parse_per_target():
    text = "10.252.0.12:33000 ok 0.3\n10.252.0.12:46000 error TimeoutError timed out\n"
    assert parse_dials(text) == {
        ("10.252.0.12", 33000): "ok 0.3",
        ("10.252.0.12", 46000): "error TimeoutError timed out",
    }


# --- firewall rules, read without changing them -------------------------------------------


def test_iptables_lines_that_drop_inbound_are_kept():
    text = (DATA / "iptables-S-after-rendezvous.txt").read_text()
    assert parse_iptables_rules(text) == [
        "-A INPUT -i fab0 -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j DROP"
    ]


def test_nft_input_policy_and_drops_are_kept_not_forward_nor_invalid():
    text = (DATA / "nft-server-policy-drop.txt").read_text()
    assert parse_nft_rules(text) == [
        "input: type filter hook input priority filter; policy drop;",
    ]
    via_iptables = parse_nft_rules((DATA / "nft-with-iptables-nft.txt").read_text())
    assert via_iptables == [
        'INPUT: iifname "fab0" tcp flags syn / fin,syn,rst,ack counter packets 0 bytes 0 drop'
    ]


def test_unreadable_rules_are_unknown_with_the_reason():
    rules = firewall_rules(
        (4, (DATA / "iptables-S-not-root.txt").read_text()),
        (1, (DATA / "nft-not-root.txt").read_text()),
    )
    assert rules.blocking == {}
    assert rules.unknown["iptables"].startswith("needs root: iptables v1.8.9 (nf_tables)")
    assert rules.unknown["nft"].startswith("needs root: Operation not permitted")
    assert rules.short() == "unknown"
    missing = firewall_rules((0, ""), (127, "sh: 1: nft: not found"))
    assert missing.describe() == "nft unknown (not installed)"
    assert missing.short() == "none dropping"


# --- the judge ----------------------------------------------------------------------------

CUT = Rules(
    {"iptables": parse_iptables_rules((DATA / "iptables-S-after-rendezvous.txt").read_text())},
    {"nft": "not installed"},
)


def test_cut_ports_are_named_with_the_peer_and_the_firewall_rule():
    assert CUT.short() == "1 dropping"
    dials = [
        Dial("node1", 32768, "ephemeral range 32768-60999", "error TimeoutError timed out"),
        Dial("node1", 46883, "ephemeral range 32768-60999", "error TimeoutError timed out"),
    ]
    (problem,) = check_after_rendezvous("10.252.0.12", dials, CUT, "10.252.0.0/24")
    assert problem.found == (
        "10.252.0.12 does not answer on ports used after the rendezvous, from node1: TCP "
        "32768, 46883 (ephemeral range 32768-60999) TimeoutError timed out"
    )
    assert problem.remedy.startswith(
        "this node's firewall: iptables drops/rejects with `-A INPUT -i fab0 -p tcp -m tcp "
        "--tcp-flags FIN,SYN,RST,ACK SYN -j DROP`; nft unknown (not installed); let the "
        "fabric in: `sudo iptables -I INPUT -s 10.252.0.0/24 -j ACCEPT`"
    )


@pytest.mark.parametrize("result", ["ok 0.4", "ok 12.0"])
def test_answered_ports_pass(result):
    dials = [Dial("node1", 32768, "ephemeral range 32768-60999", result)]
    assert check_after_rendezvous("10.252.0.12", dials, CUT, "10.252.0.0/24") == []


def test_no_route_from_the_peer_leads_with_the_route_not_the_firewall():
    said = "error OSError [Errno 101] Network is unreachable"  # the lab, node2's fab0 down
    dials = [Dial("node2", 32768, "ephemeral range 32768-60999", said)]
    (problem,) = check_after_rendezvous("10.252.0.11", dials, CUT, "10.252.0.0/24")
    assert problem.remedy == (
        "the peers have no route to 10.252.0.11: `ip route get 10.252.0.11` and `ip -br link` "
        "on node2"
    )
