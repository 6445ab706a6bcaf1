"""Record real outputs from the lab's nodes, healthy and with faults injected, as test data.

    python scripts/record_lab_outputs.py      # as root; brings the 2-node lab up if needed

Writes selftest/data/lab/<case>-<node>-<what>.txt: the host probe's full output and the
fabric ping of every peer, each taken over SSH exactly as the suite takes it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from infergate.checks.network import ping_command
from infergate.checks.probe import plan_sections, probe_script
from infergate.plan.model import parse_inventory
from infergate_lab import Lab

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "selftest" / "data" / "lab"
PLAN = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))
PROBE = probe_script(plan_sections(PLAN.image.ref, PLAN.model.path))
FABRIC = {"node1": "10.252.0.11", "node2": "10.252.0.12"}
CASES: dict[str, tuple[str, ...]] = {
    "healthy": (),
    "link-down": ("link-down", "node2"),
    "mtu-1400": ("mtu", "node2", "1400"),
    "docker-stopped": ("docker-stop", "node2"),
    "memory-held": ("hold-memory", "node1", "4"),
    "foreign-container": ("foreign-container", "node2", "1"),
    "port-taken": ("port-taken", "node1", "8000"),
}


def record(lab: Lab, case: str) -> None:
    for node, peer in (("node1", "node2"), ("node2", "node1")):
        # ssh joins its arguments into one remote command line: quote the script as one
        probe = lab.ssh(node, [shlex.join(["sh", "-c", PROBE])]).stdout
        (OUT / f"{case}-{node}-probe.txt").write_text(probe)
        ping = lab.ssh(
            node, [shlex.join(["sh", "-c", ping_command("fab0", [FABRIC[peer]])])]
        ).stdout
        (OUT / f"{case}-{node}-ping.txt").write_text(ping)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    lab = Lab(say=print)
    lab.up(2)
    for case, fault in CASES.items():
        lab.clear_faults()
        if fault:
            lab.apply_fault(fault[0], fault[1], *fault[2:])
        record(lab, case)
        print(f"recorded {case}")
    lab.clear_faults()


if __name__ == "__main__":
    main()
