"""The plan for a lab of N nodes, in the same shape as inventories/lab.yaml (its 2-node copy).

Pure: text in, nothing read or written.
"""

from __future__ import annotations

from infergate.lab import layout as L
from infergate.lab.layout import SMOLLM2, manifest_path

_NODE = """\
  - name: {name}
    address: {mgmt_ip}
    roles: [{role}]
    ssh:
      user: root
      key: {key}
      known_hosts: {known_hosts}
    fabric:
      address: {fabric_ip}/24
"""

_REST = """\
fabric:
  interface: {iface}
  subnet: 10.252.0.0/24
  mtu: {mtu}
image:
  ref: infergate-lab/vllm-cpu:0.32.0
model:
  path: {models}/SmolLM2-135M-Instruct
  served_name: smollm2-135m
  size_gib: 0.27
  manifest: {manifest}
engine:
  kind: vllm
  tensor_parallel: 1                # SmolLM2-135M has 9 heads: TP cannot split it
  pipeline_parallel: {n}                # one CPU rank per node
  dist_init_addr: {head_ip}
  dist_init_port: 29501
  api_port: 8000
  flags: [--max-model-len, "1024", --distributed-timeout-seconds, "60"]
  env:
    VLLM_HOST_IP: "{{fabric_ip}}"
    GLOO_SOCKET_IFNAME: "{{fabric_interface}}"
    VLLM_CPU_KVCACHE_SPACE: "1"
thresholds:
  kv_cache_gib: 1
  memory_headroom_gib: 2
  command_timeout_s: 20
  connect_timeout_s: 3
  rendezvous_timeout_s: 30
"""


def render_inventory(n: int) -> str:
    """The inventory of the lab's nodes 1..n: node1 is the head, the rest are workers."""
    specs = L.node_specs(n)
    nodes = "".join(
        _NODE.format(
            name=s.name,
            mgmt_ip=s.mgmt_ip,
            role="head" if s.index == 1 else "worker",
            key=L.CLIENT_KEY,
            known_hosts=L.KNOWN_HOSTS,
            fabric_ip=s.fabric_ip,
        )
        for s in specs
    )
    rest = _REST.format(
        iface=L.FABRIC_IFACE,
        mtu=L.FABRIC_MTU,
        models=L.MODELS_MOUNTPOINT,
        n=n,
        head_ip=specs[0].fabric_ip,
        manifest=manifest_path(SMOLLM2),
    )
    header = f"# The lab's plan for its {n} node(s); written by `python -m infergate.lab up`.\n"
    return f"{header}name: lab\nnodes:\n{nodes}{rest}"
