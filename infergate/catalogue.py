"""The one catalogue of problems: every check's stable code, severity, group, tier and usual
remedy, and the roots the other checks depend on. docs/problems.md is generated from it
(scripts/problem_docs.py); selftest/unit/test_catalogue.py keeps the two and the suite in step.

Codes are kept once published: a renamed test keeps its code. As DCGM's diagnostics give each
failure a `DCGM_FR_*` code and a severity (dcgm_errors.h), a code here names one requirement.
"""

from __future__ import annotations

from dataclasses import dataclass

FAIL, WARN = "fail", "warn"  # warn: the cluster still serves, the finding is reported
TIERS = ("quick", "standard", "full")  # --level; each runs its own and the lower tiers' checks

# A node's chain of roots, each needing every one before it (docs/suite.md#roots)
NODE_ROOTS = ("ssh", "facts", "tools", "docker", "image", "in-image", "rendezvous")
ENDPOINT_ROOT = "endpoint"
PROMPTS_ROOT = "prompts"  # the load's prompts, built once the endpoint answers


@dataclass(frozen=True)
class Entry:
    code: str
    group: str  # the README's group of checks: a column of preflight.html's matrix
    remedy: str  # the usual fix; the failure's own message gives the one its facts show
    severity: str = FAIL
    tier: str = "standard"
    root: str = ""  # the root this check reports, once per node; its dependents skip
    needs: str = ""  # the deepest root it needs, where its fixtures do not say (roots.py)
    tools: tuple[str, ...] = ()  # node commands it needs beyond the host probe's own


E = Entry
CHECKS: dict[str, Entry] = {
    # hosts
    "test_ssh_reachable_facts_gathered": E(
        "IG-SSH-UNREACHABLE",
        "hosts",
        "the fix ssh's own error names (key, host key, "
        "address, port); then `ssh -v` to the node from this controller",
        tier="quick",
        root="ssh",
    ),
    "test_node_tools_present": E(
        "IG-NODE-TOOLS-MISSING",
        "hosts",
        "install the packages named (apt-get install or dnf install)",
        tier="quick",
        root="tools",
    ),
    "test_docker_engine_answers": E(
        "IG-DOCKER-DOWN",
        "hosts",
        "`sudo systemctl start docker`, or give the SSH user the docker group",
        tier="quick",
        root="docker",
        tools=("docker",),
    ),
    # memory
    "test_memory_available_for_plan": E(
        "IG-MEMORY-SHORT",
        "memory",
        "free memory on the node (stop what holds it) or lower the KV budget",
        tier="quick",
    ),
    "test_memory_balanced_across_nodes": E(
        "IG-MEMORY-UNBALANCED",
        "memory",
        "free memory on the poorer node until it has 0.9 of the best",
        tier="quick",
    ),
    "test_no_foreign_containers": E(
        "IG-FOREIGN-CONTAINER",
        "memory",
        "stop the container (`docker stop`) or allow it in allow.containers",
        tier="quick",
        tools=("docker",),
    ),
    "test_no_memory_pressure_on_unified_memory": E(
        "IG-MEMORY-PRESSURE",
        "memory pressure",
        "`sudo swapoff -a` and drop what fills the page cache before launch",
        severity=WARN,
        tools=("nvidia-smi",),
    ),
    # GPUs
    "test_gpus_present_as_planned": E(
        "IG-GPU-COUNT",
        "GPUs",
        "fix nodes[].gpus, or the driver (`nvidia-smi -L`)",
        tier="quick",
        tools=("nvidia-smi",),
    ),
    "test_driver_same_on_every_node": E(
        "IG-GPU-DRIVER-DIFFERS",
        "GPUs",
        "install one driver version on every node",
        tier="quick",
        tools=("nvidia-smi",),
    ),
    "test_no_foreign_gpu_users": E(
        "IG-GPU-FOREIGN-USER",
        "GPUs",
        "stop the process holding GPU memory (its pid is named) or allow it in allow.gpu_processes",
        tier="quick",
        tools=("nvidia-smi",),
    ),
    "test_compat_libs_not_over_newer_driver": E(
        "IG-CUDA-COMPAT-OVER-DRIVER",
        "GPUs",
        "take /usr/local/cuda/compat off LD_LIBRARY_PATH and ld.so.conf.d",
    ),
    "test_image_cuda_initialises_on_driver": E(
        "IG-CUDA-INIT-FAILED",
        "GPUs",
        "an image built for this driver's CUDA, or compat libraries only over an older driver",
    ),
    "test_engine_free_memory_near_meminfo": E(
        "IG-UMA-FREE-MEMORY-GAP",
        "GPUs",
        "drop the page cache (`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`) before launch",
        severity=WARN,
    ),
    # GPU health
    "test_gpus_healthy": E(
        "IG-GPU-UNHEALTHY",
        "GPU health",
        "reset clocks and power limit (`nvidia-smi -rgc; "
        "-rac; -pl default`); a GPU with ECC errors or pending remaps goes to service",
        tools=("nvidia-smi",),
    ),
    "test_gpus_alike_across_nodes": E(
        "IG-GPU-UNLIKE",
        "GPU health",
        "set one SM clock ceiling and power limit on every node",
        severity=WARN,
        tools=("nvidia-smi",),
    ),
    "test_no_gpu_errors_in_kernel_log": E(
        "IG-GPU-XID",
        "GPU health",
        "look the Xid up in NVIDIA's Xid catalog; reboot or service the GPU it names",
    ),
    # GPUs under load
    "test_gpus_hold_clocks_under_load": E(
        "IG-GPU-LOAD-THROTTLED",
        "GPU health",
        "the slowdown's cause: airflow and fans for heat, the PSUs for a power brake "
        "(`nvidia-smi -q -d PERFORMANCE`); an Xid: NVIDIA's Xid catalog",
        tier="full",
        needs="in-image",
        tools=("nvidia-smi",),
    ),
    "test_gpu_clocks_alike_under_load": E(
        "IG-GPU-LOAD-SPREAD",
        "GPU health",
        "the slow GPU's clocks, application clocks and power limit against the fastest's",
        tier="full",
        needs="in-image",
        tools=("nvidia-smi",),
    ),
    "test_dcgm_diag_passes": E(
        "IG-DCGM-DIAG-FAILED",
        "GPU health",
        "what DCGM's message names (its DCGM_FR_* code's action)",
        tier="full",
        needs="tools",
    ),
    "test_nvml_matches_kernel_module": E(
        "IG-NVML-MISMATCH",
        "named failures",
        "reboot the node after its driver upgrade",
        tier="quick",
    ),
    # image
    "test_image_same_id_on_every_node": E(
        "IG-IMAGE-MISSING",
        "image",
        "`docker save IMAGE | ssh NODE docker load` from a node that has it",
        tier="quick",
        root="image",
        tools=("docker",),
    ),
    "test_image_versions_not_known_bad": E(
        "IG-IMAGE-KNOWN-BAD",
        "named failures",
        "an image whose versions the known-bad entry's source says are fixed",
    ),
    "test_probe_container_runs": E(
        "IG-PROBE-CONTAINER-FAILED",
        "engine",
        "what the container's stderr names (a "
        "docker_args option, a missing runtime, python3 in the image)",
        root="in-image",
    ),
    # model
    "test_model_files_present": E(
        "IG-MODEL-INCOMPLETE",
        "model",
        "copy the missing files (`rsync -a` from a node that has them)",
        tier="quick",
        tools=("find",),
    ),
    "test_model_same_files_and_sizes_on_every_node": E(
        "IG-MODEL-FILES-DIFFER",
        "model",
        "`rsync -a` the model from one node to the others",
        tier="quick",
        tools=("find",),
    ),
    "test_model_content_identical_on_every_node": E(
        "IG-MODEL-HASH-DIFFERS",
        "model",
        "copy the file again from a node whose hash is the manifest's",
        tools=("sha256sum",),
    ),
    # engine
    "test_engine_env_pins_the_fabric": E(
        "IG-ENGINE-ENV-UNPINNED",
        "engine",
        "add the named variables to engine.env",
        tier="quick",
    ),
    "test_engine_env_names_exist_on_node": E(
        "IG-ENGINE-ENV-NOT-ON-NODE",
        "engine",
        "name the node's own interface, HCA or address in engine.env (or nodes[].env)",
        tier="quick",
        tools=("ip",),
    ),
    "test_model_architecture_supported_by_image": E(
        "IG-MODEL-ARCH-UNSUPPORTED",
        "engine",
        "an image whose engine and transformers know the architecture",
    ),
    "test_engine_flags_accepted_by_image": E(
        "IG-ENGINE-FLAG-REFUSED",
        "engine",
        "drop or rename the flag in engine.flags",
    ),
    "test_no_stray_nccl_conf_in_image": E(
        "IG-IMAGE-NCCL-CONF",
        "engine",
        "remove /etc/nccl.conf from the image, or mount an empty one",
    ),
    # fabric
    "test_fabric_interface_up_with_planned_address": E(
        "IG-FABRIC-LINK-DOWN",
        "fabric",
        "`sudo ip link set IFACE up` and the planned address; then the cable and `ethtool IFACE`",
        tier="quick",
        tools=("ip",),
    ),
    "test_fabric_peers_answer_ping": E(
        "IG-FABRIC-PEER-UNREACHABLE",
        "fabric",
        "the peer's interface, address and the switch port between them",
        tier="quick",
        tools=("ping",),
    ),
    "test_rdma_ports_active_with_roce_v2_gid": E(
        "IG-RDMA-PORT-DOWN",
        "fabric",
        "bring the HCA port up and give it the fabric address (its RoCE v2 GID follows)",
        tier="quick",
    ),
    "test_fabric_mtu_equal_on_every_node": E(
        "IG-FABRIC-MTU-DIFFERS",
        "fabric",
        "`sudo ip link set IFACE mtu MTU` on the nodes that differ",
        tier="quick",
        tools=("ip",),
    ),
    "test_dist_init_port_reachable_from_every_node": E(
        "IG-DIST-INIT-UNREACHABLE",
        "fabric",
        "open the dist-init port in the head's firewall for the fabric subnet",
    ),
    # ports
    "test_engine_ports_free_on_every_node": E(
        "IG-PORT-TAKEN",
        "ports",
        "stop the holder named, or plan another port",
        tier="quick",
        tools=("ss",),
    ),
    "test_engine_ports_outside_ephemeral_range": E(
        "IG-PORT-EPHEMERAL",
        "ports",
        "reserve the port (net.ipv4.ip_local_reserved_ports) or plan one outside the range",
        severity=WARN,
        tier="quick",
    ),
    "test_ports_after_rendezvous_reachable_between_nodes": E(
        "IG-PORT-CUT",
        "ports",
        "open the fabric subnet in the node's firewall",
        tools=("ss",),
    ),
    # fabric health
    "test_kernel_log_clean_since_boot": E(
        "IG-FABRIC-KERNEL-ERRORS",
        "fabric health",
        "reseat or replace the device the kernel names; a link that flapped: its cable",
    ),
    "test_rdma_ports_error_free_at_planned_rate": E(
        "IG-RDMA-PORT-ERRORS",
        "fabric health",
        "the cable or transceiver of the port; a "
        "slow PCIe link: the BIOS update that trains it at full width",
    ),
    "test_fabric_rails_carry_planned_bandwidth": E(
        "IG-FABRIC-BANDWIDTH-LOW",
        "fabric health",
        "the rail's cable, MTU and switch port",
    ),
    # rendezvous
    "test_rendezvous_all_reduce_across_nodes": E(
        "IG-RENDEZVOUS-FAILED",
        "rendezvous",
        "what the ranks' log names (an address, an interface, a port cut)",
        root="rendezvous",
    ),
    "test_collective_sum_correct": E(
        "IG-COLLECTIVE-WRONG",
        "rendezvous",
        "look for Xid, AER and ECC errors on the node named; rerun with NCCL_PROTO=Simple",
        needs="rendezvous",
    ),
    "test_nccl_transport_and_bandwidth": E(
        "IG-NCCL-TRANSPORT",
        "rendezvous",
        "pin NCCL_IB_HCA and NCCL_SOCKET_IFNAME to the fabric; check the HCAs' GIDs",
        needs="rendezvous",
    ),
    # parity
    "test_stack_identical_on_every_node": E(
        "IG-STACK-DIFFERS",
        "parity",
        "install the same versions on every node",
    ),
    # disk
    "test_disk_room_for_image_model_and_caches": E(
        "IG-DISK-FULL",
        "disk",
        "free space on the file system named",
        tier="quick",
        tools=("findmnt",),
    ),
    "test_compile_caches_not_shared_between_nodes": E(
        "IG-CACHE-SHARED",
        "disk",
        "give each node its own cache folder on a local disk",
        tier="quick",
    ),
    # offline
    "test_tokenizer_is_a_local_path": E(
        "IG-TOKENIZER-HUB-ID",
        "offline",
        "`hf download` the tokenizer and plan its path",
        tier="quick",
    ),
    "test_hub_offline_mode_where_the_hub_is_unreachable": E(
        "IG-HUB-UNREACHABLE-ONLINE",
        "offline",
        "set HF_HUB_OFFLINE=1 in engine.env",
    ),
    # context and launch container
    "test_context_length_fits_kv_cache": E(
        "IG-CONTEXT-OVER-KV",
        "context and launch container",
        "lower the context length or raise the KV cache's memory",
        tier="quick",
    ),
    "test_chat_template_renders_in_image": E(
        "IG-CHAT-TEMPLATE",
        "context and launch container",
        "pass --chat-template, or a model whose tokenizer_config has one",
    ),
    "test_launch_container_open_files": E(
        "IG-OPEN-FILES-LOW",
        "context and launch container",
        "raise the limit: `--ulimit nofile=N:N` in engine.docker_args, or dockerd's",
    ),
    "test_launch_container_locked_memory_unlimited": E(
        "IG-MEMLOCK-LIMITED",
        "context and launch container",
        "`--ulimit memlock=-1:-1` in engine.docker_args",
    ),
    "test_launch_container_caches_writable": E(
        "IG-CACHE-NOT-WRITABLE",
        "context and launch container",
        "mount a writable folder there, owned by the container's user",
    ),
    # deploy
    "test_every_planned_node_joined": E(
        "IG-DEPLOY-NODE-MISSING",
        "deploy",
        "what the node's engine log says at its last milestone",
    ),
    "test_endpoint_answers_with_the_planned_model": E(
        "IG-DEPLOY-ENDPOINT",
        "deploy",
        "the served name and API key the plan gives",
    ),
    "test_rank_is_alive": E(
        "IG-DEPLOY-RANK-DIED",
        "deploy",
        "the rank's log names why it exited",
    ),
    "test_no_fatal_line_in_the_log": E(
        "IG-DEPLOY-FATAL-LOG",
        "deploy",
        "the logged line names the fix",
    ),
    # chaos (opt-in: -m chaos, docs/chaos.md)
    "test_probes_notice_a_killed_rank": E(
        "IG-CHAOS-KILL-UNSEEN",
        "deploy",
        "probe with a generation (SGLang: /health_generate) or watch every rank",
    ),
    "test_probes_notice_a_paused_rank": E(
        "IG-CHAOS-PAUSE-UNSEEN",
        "deploy",
        "probe with a generation under a deadline (SGLang: /health_generate)",
    ),
    "test_probes_notice_a_cut_fabric": E(
        "IG-CHAOS-CUT-UNSEEN",
        "deploy",
        "probe with a generation under a deadline (SGLang: /health_generate)",
    ),
    # inference
    "test_endpoint_serves_one_request": E(
        "IG-ENDPOINT-DOWN",
        "inference",
        "what the endpoint's status or error names (each cause has its own code below)",
        root=ENDPOINT_ROOT,
    ),
    "test_load_prompts_are_built": E(
        "IG-PROMPTS-UNBUILT",
        "performance",
        "let the endpoint through to /tokenize and /detokenize (vLLM and SGLang serve them at "
        "the server root), or give inference.dataset",
        root=PROMPTS_ROOT,
        needs=ENDPOINT_ROOT,
    ),
    "test_models_lists_the_planned_served_name": E(
        "IG-SERVED-NAME",
        "inference",
        "serve with the plan's model.served_name",
    ),
    "test_completion_answers_with_usage": E(
        "IG-COMPLETION-MALFORMED",
        "inference",
        "an engine version that returns usage",
    ),
    "test_stream_is_framed_and_ends_with_usage": E(
        "IG-STREAM-MALFORMED",
        "inference",
        "an engine version whose stream ends with usage and [DONE]",
    ),
    "test_max_tokens_is_honoured": E(
        "IG-MAX-TOKENS-IGNORED",
        "inference",
        "report it upstream with the request shown",
    ),
    "test_stop_string_ends_the_answer": E(
        "IG-STOP-IGNORED",
        "inference",
        "report it upstream with the request shown",
    ),
    "test_temperature_zero_repeats_itself": E(
        "IG-GREEDY-NOT-REPEATABLE",
        "inference",
        "batch-invariant kernels, or accept it as a warning of nondeterminism",
        severity=WARN,
    ),
    "test_bad_request_gets_a_json_4xx": E(
        "IG-BAD-REQUEST-NOT-4XX",
        "inference",
        "an engine version that validates requests",
    ),
    "test_openai_client_works_end_to_end": E(
        "IG-OPENAI-CLIENT",
        "inference",
        "what the client's error names",
    ),
    "test_known_answer": E(
        "IG-WRONG-ANSWER",
        "inference",
        "the model's weights and chat template: compare with a single-node run",
    ),
    "test_planned_context_is_served": E(
        "IG-CONTEXT-NOT-SERVED",
        "inference",
        "launch with the plan's context flag, or plan the context length the server serves",
        needs=ENDPOINT_ROOT,
    ),
    "test_each_context_rung_completes": E(
        "IG-CONTEXT-RUNG-FAILED",
        "inference",
        "the head's engine log and the kernel lines named; plan a smaller context length",
        needs=ENDPOINT_ROOT,
    ),
    "test_overlapping_requests_at_the_top_complete": E(
        "IG-CONTEXT-TOP-OVERLAP-FAILED",
        "inference",
        "the head's engine log and the kernel lines named; fewer long requests at once "
        "(--max-num-seqs) or a smaller context length",
        needs=ENDPOINT_ROOT,
    ),
    "test_answer_matches_the_reference": E(
        "IG-PARITY-DIVERGED",
        "inference",
        "the chat template, generation config, dtype and quantization against the reference's",
        needs=ENDPOINT_ROOT,
    ),
    "test_every_request_completes": E(
        "IG-REQUESTS-FAILED",
        "performance",
        "the engine log at the failing level",
    ),
    "test_usage_counts_the_streamed_tokens": E(
        "IG-USAGE-UNDERCOUNTS",
        "performance",
        "report it upstream with the stream shown",
    ),
    "test_throughput_meets_the_plan": E(
        "IG-THROUGHPUT-LOW",
        "performance",
        "what limits the engine (its metrics), or the plan's floor",
    ),
    "test_goodput_meets_the_slo": E(
        "IG-GOODPUT-LOW",
        "performance",
        "fewer concurrent requests, or the SLO",
    ),
    "test_performance_holds_against_the_baseline": E(
        "IG-REGRESSION",
        "performance",
        "what changed since the baseline (image, flags, driver)",
    ),
    "test_decode_reaches_the_roofline": E(
        "IG-ROOFLINE-LOW",
        "performance",
        "what holds decode below the memory-bandwidth ceiling: eager mode, TP over the "
        "fabric, the engine's kernels",
    ),
}

# Codes of roots whose failure has a form of its own, beside its check's code
ROOT_FORMS = {
    "IG-SSH-HUNG": (
        "hosts",
        "ssh to the node answered nothing within the deadline: its console, then `ssh -v`",
    ),
    "IG-HOST-FACTS-UNREADABLE": ("hosts", "what the probe's failing command said, on the node"),
    "IG-ENDPOINT-REFUSED": (
        "inference",
        "nothing listens at the endpoint's host:port: start the server, or fix --endpoint; "
        "one still starting: --endpoint-wait SECONDS (thresholds.endpoint_wait_s)",
    ),
    "IG-ENDPOINT-DNS": ("inference", "the endpoint's host name does not resolve: fix --endpoint"),
    "IG-ENDPOINT-TLS": (
        "inference",
        "the TLS handshake failed: --ca-bundle PATH with the endpoint's CA, or http://",
    ),
    "IG-ENDPOINT-UNAUTHORIZED": (
        "inference",
        "the endpoint refuses the API key sent (or wants one): --api-key KEY, or INFERGATE_API_KEY",
    ),
    "IG-ENDPOINT-UNKNOWN-MODEL": (
        "inference",
        "the endpoint serves no model of the plan's model.served_name: `--served-model-name`",
    ),
    "IG-ENDPOINT-SERVER-ERROR": (
        "inference",
        "the engine failed a one-token request (5xx): its log at that time, and the body quoted",
    ),
    "IG-ENDPOINT-TIMEOUT": (
        "inference",
        "the endpoint took the connection and answered nothing: a hung or loading engine, its log",
    ),
}


def entry(check: str) -> Entry | None:
    """CHECK's entry, a test function's name (`test_x`, or `test_x[node1]`)."""
    return CHECKS.get(check.partition("[")[0])


def root_check(root: str) -> str:
    """The check that reports ROOT (the host facts: the SSH check, which reads them)."""
    root = "ssh" if root == "facts" else root
    return next(name for name, e in CHECKS.items() if e.root == root)
