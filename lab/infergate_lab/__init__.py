"""The lab: N nodes on this machine, each with its own network, mount and UTS namespaces,
memory cgroup, sshd and Docker engine (or sshd alone: `up(n, docker=False)`), joined by a
management network and a separate fabric link; faults injected into them for real.
`python -m infergate_lab --help`; in Python:

    lab = Lab()
    lab.up(2)
    lab.apply_fault("mtu", "node2", "1400")
    lab.clear_faults()
    lab.down()
"""

from infergate_lab.faults import KINDS as FAULT_KINDS
from infergate_lab.inventory import render_inventory
from infergate_lab.lab import Lab
from infergate_lab.shell import LabError
from infergate_lab.status import NodeStatus

__all__ = ["FAULT_KINDS", "Lab", "LabError", "NodeStatus", "render_inventory"]
