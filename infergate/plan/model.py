"""The deployment plan: a typed, frozen model of the inventory YAML, and its pure parser.

Nothing here reads files or the network; `parse_inventory` takes the loaded YAML mapping.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Literal, cast, get_args, get_origin, get_type_hints

from infergate.plan import values as v
from infergate.plan import words as w
from infergate.plan.docker_args import DockerArgsError, parse_docker_args
from infergate.plan.rules import check_plan

# Defined beside the value readers that raise it; this module is its public home.
from infergate.plan.values import InventoryError as InventoryError

# The metadata of a field the parser works out rather than reads: no key of the plan
SET_BY_PARSER = {"plan_key": False}

EngineKind = Literal["sglang", "vllm", "vllm-ray"]
ENGINE_KINDS: tuple[EngineKind, ...] = ("sglang", "vllm", "vllm-ray")
ChaosAction = Literal["kill", "pause", "cut"]
CHAOS_ACTIONS: tuple[ChaosAction, ...] = ("kill", "pause", "cut")


@dataclass(frozen=True)
class Ssh:
    user: str = "root"  # the login user on the node
    port: int = 22  # sshd's port on the node
    key: str | None = None  # private key file; None: the ssh client's defaults
    known_hosts: str | None = None  # None: the user's ~/.ssh/known_hosts
    # false: accept-new, a node's first key kept in a known_hosts of this plan alone, a changed
    # key refused (a lab; production pins keys)
    verify_host_key: bool = True
    jump: str | None = None  # ProxyJump: a node name of this inventory, or [user@]host[:port]
    # false: the operator's own ssh_config (--ssh-user-config) is not read; a plan names no file
    config: bool = True
    # "local": the node is this controller itself (testinfra's local backend, no sshd needed)
    connection: str = "ssh"
    # the jump hosts as `ssh -J` takes them, from this controller on: a jump that names a
    # node becomes that node's user@address:port, after the node's own hops (set by the parser)
    hops: tuple[str, ...] = field(default=(), metadata=SET_BY_PARSER)


@dataclass(frozen=True)
class NodeFabric:
    address: IPv4Interface  # with its prefix, as `ip addr` shows it
    interface: str  # defaults to fabric.interface
    hcas: tuple[str, ...] = ()  # RDMA devices of this node's port (both twins on a Spark)


@dataclass(frozen=True)
class Node:
    name: str  # how failures and test ids name the node
    address: str  # management address (or DNS name) that SSH reaches
    roles: frozenset[str]  # optional; must agree with engine.dist_init_addr (the head's)
    ssh: Ssh  # how the controller reaches the node
    fabric: NodeFabric  # the node's port on the fabric the engine's ranks talk over
    path: str = field(metadata=SET_BY_PARSER)  # where the plan has the node: nodes[1]
    gpus: int = 0  # 0: a CPU node that runs one engine rank
    # per-node env, over engine.env; never in a repr: it may hold secrets (infergate.plan.secrets)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    # the NODE_OVERRIDES keys this node sets itself (its own fabric.interface, say): where a
    # value came from, so that a message names the key that holds it (key_of)
    overrides: frozenset[str] = field(default=frozenset(), metadata=SET_BY_PARSER)

    def sets(self, key: str) -> bool:
        """Whether this node sets KEY (`fabric.interface`, `env.NCCL_DEBUG`) itself, over the
        plan-wide key of NODE_OVERRIDES."""
        if key.startswith("env."):
            return key.removeprefix("env.") in self.env
        return key in self.overrides

    def key_of(self, key: str) -> str:
        """The plan key that holds this node's KEY (`fabric.interface`, `env.NCCL_DEBUG`): the
        node's own where it sets it or no plan-wide key stands in, else the plan-wide one, so
        that a message names the line that holds the value, not its default."""
        wide = _plan_wide(key)
        return plan_key(f"{self.path}.{key}" if wide is None or self.sets(key) else wide)

    @property
    def ranks(self) -> int:
        return self.gpus or 1

    @property
    def where(self) -> str:
        """How failures name this node: name and management address."""
        return f"{self.name} ({self.address})"

    @property
    def login(self) -> str:
        """user@address:port, as `ssh -J` names a hop."""
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.ssh.user}@{address}:{self.ssh.port}"

    def ssh_argv(self, *remote: str) -> list[str]:
        """The ssh command that reaches this node as the plan says and runs REMOTE there (quoted
        once more for the node's shell; a local node runs it as it is): for remedies an
        operator pastes, so shlex.join it."""
        if self.ssh.connection == "local":
            return list(remote)
        s = self.ssh
        argv = ["ssh", "-p", str(s.port)]
        argv += ["-i", s.key] if s.key else []
        argv += ["-o", f"UserKnownHostsFile={s.known_hosts}"] if s.known_hosts else []
        argv += ["-J", ",".join(s.hops)] if s.hops else []
        return [*argv, f"{s.user}@{self.address}", *([shlex.join(remote)] if remote else [])]


@dataclass(frozen=True)
class Fabric:
    interface: str  # the fabric's netdev on every node (a node may name its own)
    subnet: IPv4Network  # every node's fabric address is in it, with its prefix length
    mtu: int | None = None  # None: only equality across nodes is checked
    # each planned HCA port's link rate in Gb/s at least (`rate` in sysfs); None: not checked
    rate_gbps: float | None = None
    # what each rail must carry in Gb/s, measured node to node; None: 74.1 by ib_write_bw (80 %
    # of the lower of NVIDIA's two published Spark rails, 92.6 Gb/s), the TCP form not judged
    min_gbps: float | None = None
    # every pair's bandwidth measured up to this many nodes; past it, sampled rounds
    all_pairs_up_to: int = 16
    # past all_pairs_up_to: this many rounds of the pairs' tournament, each measuring every node
    # with one peer both ways (one more where the count is odd: every node twice at least)
    pair_sample_rounds: int = 4
    # which rounds the sample takes: change it to cover other pairs on the next run
    pair_sample_seed: int = 0
    # the in-image all-reduce sweep's largest size, where busbw is judged; a lab node's
    # memory cgroup takes a smaller one (docs/checks.md#collective-sweep)
    collective_max_mib: int = 1024


@dataclass(frozen=True)
class Image:
    ref: str  # the engine image every node runs
    id: str | None = None  # expected `docker image inspect --format {{.Id}}`


@dataclass(frozen=True)
class Model:
    path: str  # the same path on every node
    served_name: str  # the model name the API serves
    size_gib: float | None = None  # the weights' size: each node's share must fit its memory
    manifest: str | None = None  # sha256 manifest file on the controller


@dataclass(frozen=True)
class Engine:
    kind: EngineKind  # the engine and how it launches ranks (vllm-ray: over a Ray cluster)
    tensor_parallel: int  # tensor_parallel x pipeline_parallel = every node's ranks summed
    pipeline_parallel: int
    dist_init_addr: IPv4Address  # must be a node's fabric address
    dist_init_port: int  # the rendezvous port on the head
    api_port: int  # the OpenAI-compatible API's port on the head
    # flags and env never in a repr: they may hold an API key, HF_TOKEN (infergate.plan.secrets)
    flags: tuple[str, ...] = field(default=(), repr=False)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold {fabric_ip} etc.
    docker_args: tuple[str, ...] = ()  # extra `docker run` options for the engine's containers
    secret_env: tuple[str, ...] = ()  # env names whose values are secrets whatever their names


def flag_values(flags: Sequence[str], *names: str) -> list[tuple[str, str | None]]:
    """(name, value) of each of NAMES in engine FLAGS, `--name value` or `--name=value`, in
    their order; None for a last flag with nothing after it."""
    found = []
    for i, flag in enumerate(flags):
        name, eq, value = flag.partition("=")
        if name in names:
            found.append((name, value if eq else (flags[i + 1] if i + 1 < len(flags) else None)))
    return found


def flag_value(flags: Sequence[str], *names: str) -> str | None:
    """The value of the last of NAMES in FLAGS, as the engine's argparse keeps it."""
    found = flag_values(flags, *names)
    return found[-1][1] if found else None


@dataclass(frozen=True)
class Thresholds:
    kv_cache_gib: float = 20.0  # each node's KV cache budget, beside its share of the weights
    memory_headroom_gib: float = 10.0  # and this much more for everything else
    min_mem_available_gib: float | None = None  # overrides the computed need
    command_timeout_s: float = 30.0  # each remote command's own timeout
    connect_timeout_s: float = 5.0  # each SSH connection's
    # SGLang refuses to start when the least free memory of a TP rank is below 0.9 of a
    # rank's own (docs/notes.md#sizing); the same ratio keeps vLLM's KV cache from shrinking
    tp_balance_min_ratio: float = 0.9
    # the engine's own free figure this far below MemAvailable: page cache, drop caches
    page_cache_gap_gib: float = 10.0
    # GB/s, gigabytes a second as nccl-tests' busbw (fabric.min_gbps is in gigabits), at the
    # sweep's largest size (fabric.collective_max_mib); a Spark pair at 1 GiB: 21.8
    nccl_busbw_min_gbytes_per_sec: float | None = None
    # the engine container's open files, at least (and 4 per request the load holds open):
    # vLLM and SGLang raise their soft limit to 65535 themselves, within the hard one
    min_open_files: float = 65536
    rendezvous_timeout_s: float = 60.0
    # launch milestones, seconds from the start of the launch (docs/notes.md#launch-deadlines)
    dist_init_timeout_s: float = 120.0
    weights_timeout_s: float = 900.0
    ready_timeout_s: float = 1200.0
    cluster_join_timeout_s: float = 120.0  # every node in `ray status`
    # the first hash of every model file: 127 GB at ~212 MB/s in 10 min, so an hour
    model_hash_timeout_s: float = 3600.0
    # how long the inference phase waits for the endpoint to answer HTTP (--endpoint-wait)
    endpoint_wait_s: float = 10.0
    # the full tier's GPU load: seconds of bf16 matmuls on every GPU of every node at once
    gpu_load_s: float = 10.0
    # GPUs of one model hold a median SM clock under load within this many percent of the fastest
    gpu_load_clock_spread_pct: float = 10.0
    # `dcgmi diag -r LEVEL -j` after the load, where a node has dcgmi; 0: not run
    dcgm_diag_level: float = 1


@dataclass(frozen=True)
class Allow:
    """What may run on a node beside the plan: container names and GPU process names (globs)."""

    containers: tuple[str, ...] = ()  # e.g. monitoring-*
    gpu_processes: tuple[str, ...] = ()  # e.g. dcgm*


@dataclass(frozen=True)
class Probe:
    """A correctness probe: a prompt whose answer must match `expect` (a regex, any case)."""

    prompt: str
    expect: str  # a regular expression, any case
    max_tokens: int = 32


@dataclass(frozen=True)
class Slo:
    """Service level objectives of one request, as `vllm bench serve --goodput` takes them
    (https://github.com/vllm-project/vllm/blob/main/vllm/benchmarks/serve.py): a completed
    request within every objective set counts towards goodput."""

    ttft_ms: float | None = None  # time to first token, at most
    tpot_ms: float | None = None  # time per output token after the first, at most
    e2e_ms: float | None = None  # the whole request, sent to last event, at most
    # the share of each level's requests (failed ones included) within every objective set;
    # judged at every level (default: goodput is reported, not gated)
    min_goodput_fraction: float | None = None

    @property
    def terms(self) -> dict[str, float]:
        """The objectives set, by vLLM's --goodput names (ttft, tpot, e2el), in ms."""
        named = {"ttft": self.ttft_ms, "tpot": self.tpot_ms, "e2el": self.e2e_ms}
        return {name: ms for name, ms in named.items() if ms is not None}


# docs/parity.md: prompts of different kinds (a fact, arithmetic, code, a list, prose, a
# translation), each short, so that every answer runs to max_tokens or its own end of sequence
PARITY_PROMPTS = (
    "What is the capital city of France? Answer in one sentence.",
    "What is 12 times 17? Show your working.",
    "Write a Python function that returns the reverse of a string.",
    "List the seven colours of the rainbow.",
    "Write two sentences about the sea.",
    "Translate 'good morning, my friend' into Spanish.",
)


@dataclass(frozen=True)
class Parity:
    """inference.parity: the served greedy answers against a reference recorded on a trusted
    topology (`infergate reference record`); docs/parity.md."""

    reference: str | None = None  # the reference file on the controller; None: not judged
    # the tolerances' defaults: the lab's measurement, docs/parity.md#tolerances (one node
    # against PP 2: every token matched, drift 0.164 at most; another chat template: 0 matched)

    min_matching_tokens: int = 16  # each prompt's greedy prefix that must match (or all of it)
    max_logprob_drift: float = 0.5  # max |delta logprob| of the chosen token over that prefix
    top_logprobs: int = 5  # alternatives recorded per position (vLLM's --max-logprobs: 20)
    max_tokens: int = 32  # per answer
    prompts: tuple[str, ...] = PARITY_PROMPTS


@dataclass(frozen=True)
class Roofline:
    """inference.roofline: decode at concurrency 1 against the memory-bandwidth ceiling of one
    stream, from config.json and each rank's bandwidth (docs/performance.md#roofline)."""

    # the least share of the ceiling decode must reach at c = 1; None: reported, not gated
    min_fraction: float | None = None
    # every rank's memory bandwidth, over the GPU table and the CPU nodes' measured copy
    bandwidth_gb_s: float | None = None


@dataclass(frozen=True)
class Ladder:
    """The long-context ladder: a request at each fraction of the planned context length
    (else the served one), then `overlapping` at once at the top (docs/context-ladder.md)."""

    enabled: bool = True  # false: the ladder's checks are skipped, naming this key
    rungs: tuple[float, ...] = (0.25, 0.5, 0.75, 0.95)  # fractions of the context, rising
    overlapping: int = 2  # requests at once at the top rung; 0: none
    output_tokens: int = 16  # each answer's length (max_tokens with ignore_eos)
    # the slowest prefill accepted: a rung's deadline is inference.request_timeout_s plus
    # its prompt tokens at this rate (docs/context-ladder.md#deadlines)
    min_prefill_tokens_per_s: float = 200.0


# an open-loop level's requests in flight at most (inference/load.py); later arrivals wait,
# and their queue time says so
MAX_IN_FLIGHT = 1024


@dataclass(frozen=True)
class Inference:
    """What tests_inference sends and the figures it gates on."""

    concurrency: tuple[int, ...] = (1, 4, 16)  # closed-loop levels, rising; --max-concurrency
    # open-loop levels in requests/s, Poisson arrivals, like `vllm bench serve --request-rate`
    request_rates: tuple[float, ...] = ()
    # requests per level; None: max(64, 4 x the concurrency), an open-loop level at least
    # 30 s of arrivals; at least the highest concurrency; not with duration_s
    requests_per_level: int | None = None
    # seconds a level keeps sending (those in flight then finish and count); not with
    # requests_per_level
    duration_s: float | None = None
    input_tokens: int = 1024  # per prompt, as the served model's tokenizer counts it
    output_tokens: int = 128  # per answer (max_tokens with ignore_eos)
    # lengths uniform in [(1 - spread) x, (1 + spread) x], like --random-range-ratio
    spread: float = 0.0
    seed: int = 0  # the prompts' and the arrivals' random seed: the same seed, the same load
    # a ShareGPT JSON or JSONL file of prompts on the controller, instead of random ones
    dataset: str | None = None
    warmup_requests: int = 2  # sent first and not counted
    # a stream's whole life: the longest answers at the highest concurrency on a slow engine
    # take tens of seconds; one still open past it is a hang, and the ranks' stacks are taken
    request_timeout_s: float = 120.0
    min_output_tokens_per_s: float | None = None  # aggregate, at the highest concurrency
    max_ttft_ms: float | None = None  # median, at concurrency 1
    baseline: str | None = None  # the baseline JSON file on the controller
    baseline_tolerance: float = 0.2  # a fraction: 0.2 = 20 % worse is still fine
    # the model streams its reasoning apart from the answer (`delta.reasoning_content`, or
    # `delta.reasoning` in vLLM since its rename); probes then judge the answer alone
    thinking: bool = False
    probes: tuple[Probe, ...] = ()
    slo: Slo = Slo()  # per-request objectives: goodput, and its gate
    ladder: Ladder = Ladder()  # the long-context ladder
    parity: Parity = Parity()  # the answers against a recorded reference
    roofline: Roofline = Roofline()  # decode against the memory-bandwidth ceiling


GuardMode = Literal["auto", "on", "off"]
GUARD_MODES: tuple[GuardMode, ...] = ("auto", "on", "off")


@dataclass(frozen=True)
class Guard:
    """The memory guard of the launch and the load: MemAvailable below a floor stops the run."""

    # auto: stop the run on unified memory (a GPU with no memory of its own, GB10); on: on
    # every node; off: no sampling. auto and on record the curves everywhere
    memory: GuardMode = "auto"
    # MemAvailable (bounded by the node's memory cgroup) below this stops the run; the
    # 2x GB10 reporters' watchdog used 8 GiB
    memory_floor_gib: float = 8.0
    memory_interval_s: float = 1.0  # seconds between two samples of a node


@dataclass(frozen=True)
class Chaos:
    """What the opt-in chaos tests (`-m chaos`) do to a worker rank; how soon probes notice."""

    # kill: `docker kill` its container; pause: `docker pause`; cut: its fabric link down
    actions: tuple[ChaosAction, ...] = CHAOS_ACTIONS
    cut_s: float = 20.0  # how long the fabric stays down; the node restores it itself
    observe_s: float = 60.0  # how long the probes watch after the action
    probe_timeout_s: float = 5.0  # each probe's own deadline: a hung one counts as failed
    max_health_detect_s: float = 30.0  # the head's /health must fail within this
    max_generation_detect_s: float | None = None  # a generation must fail within this


@dataclass(frozen=True)
class Inventory:
    name: str  # the plan's name, in reports
    nodes: tuple[Node, ...]  # the machines, each running its share of the engine's ranks
    fabric: Fabric  # the network the ranks talk over (NCCL, the rendezvous)
    image: Image
    model: Model
    engine: Engine
    thresholds: Thresholds  # the figures checks gate on, each with a default
    allow: Allow = Allow()
    inference: Inference = Inference()
    guard: Guard = Guard()
    chaos: Chaos = Chaos()

    @property
    def head(self) -> Node:
        """The node whose fabric address is the dist-init address."""
        return next(n for n in self.nodes if n.fabric.address.ip == self.engine.dist_init_addr)

    def peers(self, node: Node) -> list[Node]:
        """Every other node of the plan."""
        return [n for n in self.nodes if n.name != node.name]

    def mem_needed_gib(self, node: Node) -> float:
        """Memory a node must have available: its share of the weights + KV budget + headroom."""
        t = self.thresholds
        if t.min_mem_available_gib is not None:
            return t.min_mem_available_gib
        world = sum(n.ranks for n in self.nodes)
        weights = (self.model.size_gib or 0.0) * node.ranks / world
        return weights + t.kv_cache_gib + t.memory_headroom_gib

    def node_env(self, node: Node) -> dict[str, str]:
        """The engine environment for one node, placeholders resolved."""
        values = {
            "fabric_ip": str(node.fabric.address.ip),
            "fabric_interface": node.fabric.interface,
            "head_fabric_ip": str(self.engine.dist_init_addr),
            "node_name": node.name,
            "node_index": str(self.nodes.index(node)),
        }
        merged = {**self.engine.env, **node.env}
        return {k: v.format(**values) for k, v in merged.items()}


# A node's keys that stand, for that node, in for a plan-wide key (plan_schema documents them)
NODE_OVERRIDES = {"fabric.interface": "fabric.interface", "env": "engine.env"}


def _plan_wide(key: str) -> str | None:
    """The plan-wide key that a node's KEY falls back on (`env.X`: `engine.env.X`), or None."""
    for mine, plan in NODE_OVERRIDES.items():
        if key == mine or key.startswith(f"{mine}."):
            return plan + key.removeprefix(mine)
    return None


def plan_key(key: str) -> str:
    """KEY, once the plan's model is seen to hold it: `thresholds.weights_timeout_s`,
    `nodes[1].fabric.interface`, `engine.env.NCCL_DEBUG`. A message that names a key the plan
    does not have sends the operator hunting; this raises KeyError instead."""
    if not is_plan_key(key):
        raise KeyError(f"{key!r} is no key of the plan (infergate.plan.model.Inventory)")
    return key


_INDEX = re.compile(r"\[(\d*|\*)\]$")  # a list's item, as keys name it: nodes[1], nodes[], nodes[*]


def is_plan_key(key: str) -> bool:
    """Whether KEY names a field of the plan's model, the dataclasses above (each field a
    key, but those SET_BY_PARSER), or a variable of an env mapping."""
    model: object = Inventory
    for part in key.split("."):
        if get_origin(model) is Mapping:  # an env: any variable's name
            model = str
            continue
        name = _INDEX.sub("", part)
        if not (isinstance(model, type) and is_dataclass(model)) or name not in keys(model):
            return False
        model = get_type_hints(model)[name]
        if name != part:  # nodes[1]: an item of the list
            if get_origin(model) is not tuple:
                return False
            model = get_args(model)[0]
    return True


def keys(model: type) -> tuple[str, ...]:
    """The plan keys of one section of the model: its fields, but those SET_BY_PARSER. The
    parser's Sections accept these and no others, so a field is a key and a key a field."""
    return tuple(f.name for f in fields(model) if f.metadata != SET_BY_PARSER)


PLACEHOLDERS = ("fabric_ip", "fabric_interface", "head_fabric_ip", "node_name", "node_index")


_ENV = v.env_map(PLACEHOLDERS)
_PLAN_NAME = v.text_upto(128)
_IMAGE_ID = v.matching(re.compile(r"sha256:[0-9a-f]{64}"), "an image ID like sha256:<64 hex>")
_GIB = v.number_in(0, 65536, " GiB", above=True)  # 64 TiB: more than any one node holds
_GIB_OR_ZERO = v.number_in(0, 65536, " GiB")
_RATIO = v.number_in(0, 1, " (a ratio)", above=True)


def parse_inventory(data: object) -> Inventory:
    """Build the typed inventory from loaded YAML; raise InventoryError naming the key path.
    Each section is checked on its own first, then the rules that tie sections together."""
    if isinstance(data, dict) and "all" in data and "nodes" not in data:
        raise InventoryError(
            "all",
            "this is an Ansible inventory, not a plan: `infergate plan from-ansible "
            "PATH` writes a plan from it",
        )
    top = v.Section(data, v.ROOT, keys(Inventory))
    fabric = top.need("fabric", _fabric)
    interface = fabric.interface if fabric else "-"  # a broken fabric: the nodes are read alone
    inventory = Inventory(
        name=top.need("name", _PLAN_NAME),
        nodes=top.need("nodes", v.list_of(lambda d, p: _node(d, p, interface), min_len=1)),
        fabric=fabric,
        image=top.need("image", _image),
        model=top.need("model", _model),
        engine=top.need("engine", _engine),
        thresholds=top.get("thresholds", _thresholds, Thresholds()),
        allow=top.get("allow", _allow, Allow()),
        inference=top.get("inference", _inference, Inference()),
        guard=top.get("guard", _guard, Guard()),
        chaos=top.get("chaos", _chaos, Chaos()),
    )
    check_plan(top.built(inventory))
    return replace(inventory, nodes=_with_hops(inventory.nodes))


def _with_hops(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    """Each node with its jump hosts resolved (check_plan has refused jump loops)."""
    by_name = {n.name: n for n in nodes}

    def hops(node: Node) -> tuple[str, ...]:
        jump = node.ssh.jump
        if jump is None or jump not in by_name:
            return () if jump is None else (jump,)
        return (*hops(by_name[jump]), by_name[jump].login)

    return tuple(replace(n, ssh=replace(n.ssh, hops=hops(n))) for n in nodes)


def _node(data: object, path: str, interface: str) -> Node:
    s = v.Section(data, path, keys(Node))
    node = Node(
        name=s.need("name", v.NODE_NAME),
        address=s.need("address", v.host),
        roles=s.get("roles", _roles, frozenset()),
        ssh=s.get("ssh", _ssh, Ssh()),
        fabric=s.need("fabric", lambda d, p: _node_fabric(d, p, interface)),
        gpus=s.get("gpus", v.int_in(0, 64), 0),
        env=s.get("env", _ENV, {}),
        path=path,
        overrides=frozenset(k for k in NODE_OVERRIDES if _given(s.data, k.split("."))),
    )
    return s.built(node)


def _given(data: object, key: list[str]) -> bool:
    """Whether the loaded YAML DATA holds the dotted KEY."""
    return not key or (
        isinstance(data, Mapping) and key[0] in data and _given(data[key[0]], key[1:])
    )


_ROLE_LIST = v.list_of(v.choice(("head", "worker")))


@v.written_as(_ROLE_LIST)
def _roles(data: object, path: str) -> frozenset[str]:
    return frozenset(_ROLE_LIST(data, path))


def _ssh(data: object, path: str) -> Ssh:
    s = v.Section(data, path, keys(Ssh))
    ssh = Ssh(
        user=s.get("user", w.user_name, "root"),
        port=s.get("port", v.PORT, 22),
        key=s.maybe("key", w.ssh_path),
        known_hosts=s.maybe("known_hosts", w.ssh_path),
        verify_host_key=s.get("verify_host_key", v.boolean, True),
        jump=s.maybe("jump", w.jump),
        connection=s.get("connection", v.choice(("ssh", "local")), "ssh"),
        config=s.get("config", w.ssh_include, Ssh.config),
    )
    return s.built(ssh)


def _node_fabric(data: object, path: str, default_interface: str) -> NodeFabric:
    s = v.Section(data, path, keys(NodeFabric))
    fabric = NodeFabric(
        address=s.need("address", v.ipv4_interface),
        interface=s.get("interface", v.IFNAME, default_interface),
        hcas=s.get("hcas", v.list_of(w.hca_name), ()),
    )
    return s.built(fabric)


def _fabric(data: object, path: str) -> Fabric:
    s = v.Section(data, path, keys(Fabric))
    fabric = Fabric(
        interface=s.need("interface", v.IFNAME),
        subnet=s.need("subnet", v.ipv4_network),
        mtu=s.maybe("mtu", v.int_in(576, 9216)),  # IPv4's minimum to the largest jumbo frame
        rate_gbps=s.maybe("rate_gbps", _GBPS),
        min_gbps=s.maybe("min_gbps", _GBPS),
        all_pairs_up_to=s.get("all_pairs_up_to", v.int_in(2, 100_000), Fabric.all_pairs_up_to),
        pair_sample_rounds=s.get(
            "pair_sample_rounds", v.int_in(2, 100_000), Fabric.pair_sample_rounds
        ),
        pair_sample_seed=s.get("pair_sample_seed", v.int_in(0, 2**32 - 1), Fabric.pair_sample_seed),
        collective_max_mib=s.get(
            "collective_max_mib", v.int_in(1, 65536), Fabric.collective_max_mib
        ),
    )
    return s.built(fabric)


_GBPS = v.number_in(0, 10_000, " Gb/s", above=True)  # 10 Tb/s: beyond any one port


def _image(data: object, path: str) -> Image:
    s = v.Section(data, path, keys(Image))
    return s.built(Image(ref=s.need("ref", w.image_ref), id=s.maybe("id", _IMAGE_ID)))


def _model(data: object, path: str) -> Model:
    s = v.Section(data, path, keys(Model))
    model = Model(
        path=s.need("path", _absolute_path),
        served_name=s.need("served_name", v.argument),
        size_gib=s.maybe("size_gib", _GIB),
        manifest=s.maybe("manifest", v.text),
    )
    return s.built(model)


def _absolute_path(data: object, path: str) -> str:
    found = v.text(data, path)
    if not found.startswith("/"):  # the same path on every node: relative to what?
        raise InventoryError(path, f"{found!r} is not an absolute path" + _hub_hint(found))
    if ":" in found or "," in found:  # `docker run -v PATH:PATH:ro` would split it
        raise InventoryError(path, f"{found!r} holds ':' or ',', which a docker mount splits on")
    return found


v.described(_absolute_path, pattern=f"^/[^:,{v.CONTROLS}]*$", maxLength=v.MAX_TEXT)
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")  # org/name, as the Hugging Face hub names a repo


def _hub_hint(found: str) -> str:
    """For a hub id given as the model: the engine would download it on every node at every
    launch, and an offline node fails; the weights belong on each node's disk."""
    if not _HUB_ID.fullmatch(found):
        return ""
    local = f"/srv/models/{found.rsplit('/', 1)[1]}"
    return (
        f" but a hub id: download it once (`hf download {found} --local-dir {local}`), copy "
        f"it to every node and plan {local}"
    )


def _engine(data: object, path: str) -> Engine:
    s = v.Section(data, path, keys(Engine))
    engine = Engine(
        kind=cast(EngineKind, s.need("kind", v.choice(ENGINE_KINDS))),
        tensor_parallel=s.get("tensor_parallel", v.int_in(1, 4096), 1),
        pipeline_parallel=s.get("pipeline_parallel", v.int_in(1, 4096), 1),
        dist_init_addr=s.need("dist_init_addr", v.ipv4_address),
        dist_init_port=s.need("dist_init_port", v.PORT),
        api_port=s.need("api_port", v.PORT),
        flags=s.get("flags", v.flag_list, ()),
        env=s.get("env", _ENV, {}),
        docker_args=s.get("docker_args", v.docker_arg_list, ()),
        secret_env=s.get("secret_env", v.list_of(v.ENV_NAME), ()),
    )
    _docker_args(s, engine.docker_args)
    return s.built(engine)


def _docker_args(s: v.Section, args: tuple[str, ...]) -> None:
    """Each of ARGS (the docker_args of the engine section S) is an option the Docker API can
    be given (infergate.plan.docker_args): the launch would refuse the rest on the nodes,
    after the preflight had passed."""
    key = s.at("docker_args")
    try:
        parse_docker_args(args)
    except DockerArgsError as e:
        s.record(InventoryError(key, str(e).removeprefix(f"{key}: ")))


_COMMAND_S = v.number_in(1, 3600, " s")
_MILESTONE_S = v.number_in(1, 86400, " s")  # a day: a first hash or load of ~1 TB of weights
_THRESHOLD_BOUNDS: dict[str, v.Reader[float]] = {
    "kv_cache_gib": _GIB_OR_ZERO,
    "memory_headroom_gib": _GIB_OR_ZERO,
    "min_mem_available_gib": _GIB,
    "command_timeout_s": _COMMAND_S,
    "connect_timeout_s": v.number_in(1, 300, " s"),
    "tp_balance_min_ratio": _RATIO,
    "page_cache_gap_gib": _GIB_OR_ZERO,
    "nccl_busbw_min_gbytes_per_sec": v.number_in(0, 10_000, " GB/s", above=True),
    "min_open_files": v.number_in(1024, 2**27, " files"),
    "rendezvous_timeout_s": _COMMAND_S,
    "dist_init_timeout_s": _MILESTONE_S,
    "weights_timeout_s": _MILESTONE_S,
    "ready_timeout_s": _MILESTONE_S,
    "cluster_join_timeout_s": _MILESTONE_S,
    "model_hash_timeout_s": _MILESTONE_S,
    "endpoint_wait_s": v.number_in(0, 3600, " s"),  # endpoint_gate.MAX_WAIT_S
    "gpu_load_s": v.number_in(1, 600, " s"),
    "gpu_load_clock_spread_pct": v.number_in(0, 100, " %", above=True),
    "dcgm_diag_level": v.int_in(0, 4),
}


# a key of an older plan, refused with what its new name is and why it changed
_THRESHOLDS_RENAMED = {
    "nccl_busbw_min_gbps": "renamed thresholds.nccl_busbw_min_gbytes_per_sec (the same number): "
    "it is in GB/s, gigabytes a second as nccl-tests' busbw, where fabric.min_gbps is in "
    "Gb/s, gigabits"
}


def _thresholds(data: object, path: str) -> Thresholds:
    """Each threshold within its bounds; an absent (or null) one keeps its default."""
    s = v.Section(data, path, keys(Thresholds), _THRESHOLDS_RENAMED)
    found = {key: s.maybe(key, _THRESHOLD_BOUNDS[key]) for key in s.known}
    return s.built(Thresholds(**{k: value for k, value in found.items() if value is not None}))


def _allow(data: object, path: str) -> Allow:
    s = v.Section(data, path, keys(Allow))
    allow = Allow(
        containers=s.get("containers", v.list_of(v.text), ()),
        gpu_processes=s.get("gpu_processes", v.list_of(v.text), ()),
    )
    return s.built(allow)


_TOKENS = v.int_in(1, 1_048_576)
_MS = v.number_in(0, 3_600_000, " ms", above=True)


def _inference(data: object, path: str) -> Inference:
    s = v.Section(data, path, keys(Inference))
    d = Inference()
    inference = Inference(
        concurrency=s.get("concurrency", _levels, d.concurrency),
        request_rates=s.get("request_rates", _rates, d.request_rates),
        requests_per_level=s.maybe("requests_per_level", v.int_in(1, 100_000)),
        duration_s=s.maybe("duration_s", v.number_in(0, 86_400, " s", above=True)),
        input_tokens=s.get("input_tokens", _TOKENS, d.input_tokens),
        output_tokens=s.get("output_tokens", _TOKENS, d.output_tokens),
        spread=s.get("spread", _SPREAD, d.spread),
        seed=s.get("seed", v.int_in(0, 2**32 - 1), d.seed),
        dataset=s.maybe("dataset", v.text),
        warmup_requests=s.get("warmup_requests", v.int_in(0, 10_000), d.warmup_requests),
        request_timeout_s=s.get(
            "request_timeout_s", v.number_in(0, 3600, " s", above=True), d.request_timeout_s
        ),
        min_output_tokens_per_s=s.maybe(
            "min_output_tokens_per_s", v.number_in(0, 10_000_000, " tokens/s", above=True)
        ),
        max_ttft_ms=s.maybe("max_ttft_ms", _MS),
        baseline=s.maybe("baseline", v.text),
        baseline_tolerance=s.get("baseline_tolerance", _RATIO, d.baseline_tolerance),
        thinking=s.get("thinking", v.boolean, d.thinking),
        probes=s.get("probes", v.list_of(_probe), ()),
        slo=s.get("slo", _slo, Slo()),
        ladder=s.get("ladder", _ladder, Ladder()),
        parity=s.get("parity", _parity, Parity()),
        roofline=s.get("roofline", _roofline, Roofline()),
    )
    s.built(inference)  # the rules between its keys need every key read
    _check_levels(s, inference)
    return s.built(inference)


def _check_levels(s: v.Section, i: Inference) -> None:
    """Levels to run, each for a number of requests or for a time, not both; enough requests
    to fill the highest concurrency; a TTFT gate where it is judged."""
    if not i.concurrency and not i.request_rates:
        said = "no levels: give concurrency or request_rates"
        s.record(InventoryError(s.at("concurrency"), said))
    requests, top = i.requests_per_level, max(i.concurrency, default=0)
    if requests is not None and i.duration_s is not None:
        s.record(
            InventoryError(
                s.at("duration_s"), "a level runs for requests_per_level or duration_s; give one"
            )
        )
    if requests is not None and requests < top:
        said = f"{requests} is fewer than the highest concurrency ({top})"
        s.record(InventoryError(s.at("requests_per_level"), said))
    if i.max_ttft_ms is not None and 1 not in i.concurrency:
        said = "is judged at concurrency 1; add 1 to levels"
        s.record(InventoryError(s.at("max_ttft_ms"), said))


def _slo(data: object, path: str) -> Slo:
    s = v.Section(data, path, keys(Slo))
    slo = s.built(
        Slo(
            ttft_ms=s.maybe("ttft_ms", _MS),
            tpot_ms=s.maybe("tpot_ms", _MS),
            e2e_ms=s.maybe("e2e_ms", _MS),
            min_goodput_fraction=s.maybe("min_goodput_fraction", _RATIO),
        )
    )
    if slo.min_goodput_fraction is not None and not slo.terms:
        raise InventoryError(
            s.at("min_goodput_fraction"),
            "gates goodput, which needs an objective: set ttft_ms, tpot_ms or e2e_ms beside it",
        )
    return slo


_SPREAD = v.number_in(0, 0.99, "")


_FRACTION_LIST = v.list_of(v.number_in(0, 1, " (a fraction of the context)", above=True))


@v.written_as(_FRACTION_LIST)
def _fractions(data: object, path: str) -> tuple[float, ...]:
    """The ladder's rungs: fractions of the context length, rising."""
    rungs = _FRACTION_LIST(data, path)
    _rising(rungs, path)
    return rungs


def _ladder(data: object, path: str) -> Ladder:
    s = v.Section(data, path, keys(Ladder))
    d = Ladder()
    ladder = Ladder(
        enabled=s.get("enabled", v.boolean, d.enabled),
        rungs=s.get("rungs", _fractions, d.rungs),
        overlapping=s.get("overlapping", v.int_in(0, 64), d.overlapping),
        output_tokens=s.get("output_tokens", v.int_in(1, 4096), d.output_tokens),
        min_prefill_tokens_per_s=s.get(
            "min_prefill_tokens_per_s",
            v.number_in(0, 10_000_000, " tokens/s", above=True),
            d.min_prefill_tokens_per_s,
        ),
    )
    return s.built(ladder)


_DRIFT = v.number_in(0, 100, " nats")


def _parity(data: object, path: str) -> Parity:
    s = v.Section(data, path, keys(Parity))
    d = Parity()
    return s.built(
        Parity(
            reference=s.maybe("reference", v.text),
            min_matching_tokens=s.get("min_matching_tokens", _TOKENS, d.min_matching_tokens),
            max_logprob_drift=s.get("max_logprob_drift", _DRIFT, d.max_logprob_drift),
            top_logprobs=s.get("top_logprobs", v.int_in(1, 20), d.top_logprobs),
            max_tokens=s.get("max_tokens", _TOKENS, d.max_tokens),
            prompts=s.get("prompts", v.list_of(v.prose, min_len=1), d.prompts),
        )
    )


def _roofline(data: object, path: str) -> Roofline:
    s = v.Section(data, path, keys(Roofline))
    return s.built(
        Roofline(
            min_fraction=s.maybe("min_fraction", v.number_in(0, 2, "", above=True)),
            bandwidth_gb_s=s.maybe("bandwidth_gb_s", v.number_in(0, 100_000, " GB/s", above=True)),
        )
    )


_LEVEL_LIST = v.list_of(v.int_in(1, 4096))
_RATE_LIST = v.list_of(v.number_in(0, 100_000, " requests/s", above=True))


def _rising(values: tuple[float, ...], path: str) -> None:
    """Levels rise, so that each names one level of the report."""
    for i in range(1, len(values)):
        if values[i] <= values[i - 1]:
            raise InventoryError(
                f"{path}[{i}]",
                f"{values[i]:g} does not follow {values[i - 1]:g}; list levels rising",
            )


@v.written_as(_LEVEL_LIST)
def _levels(data: object, path: str) -> tuple[int, ...]:
    """Concurrency levels: positive and rising."""
    levels = _LEVEL_LIST(data, path)
    _rising(levels, path)
    return levels


@v.written_as(_RATE_LIST)
def _rates(data: object, path: str) -> tuple[float, ...]:
    """Request rates: positive and rising."""
    rates = _RATE_LIST(data, path)
    _rising(rates, path)
    return rates


def _probe(data: object, path: str) -> Probe:
    s = v.Section(data, path, keys(Probe))
    probe = Probe(
        prompt=s.need("prompt", v.prose),
        expect=s.need("expect", _regex),
        max_tokens=s.get("max_tokens", _TOKENS, 32),
    )
    return s.built(probe)


def _regex(data: object, path: str) -> str:
    found = v.text(data, path)
    try:
        re.compile(found, re.IGNORECASE)
    except re.error as e:
        raise InventoryError(path, f"{found!r} is not a regular expression: {e}") from None
    return found


def _guard(data: object, path: str) -> Guard:
    s = v.Section(data, path, keys(Guard))
    d = Guard()
    guard = Guard(
        memory=cast(GuardMode, s.get("memory", v.choice(GUARD_MODES), str(d.memory))),
        memory_floor_gib=s.get("memory_floor_gib", _GIB_OR_ZERO, d.memory_floor_gib),
        memory_interval_s=s.get(
            "memory_interval_s", v.number_in(0.2, 60, " s"), d.memory_interval_s
        ),
    )
    return s.built(guard)


_CHAOS_S = v.number_in(0, 3600, " s", above=True)
# the choice reads a ChaosAction: mypy sees only its str
_ACTIONS = cast(v.Reader[tuple[ChaosAction, ...]], v.list_of(v.choice(CHAOS_ACTIONS), min_len=1))


def _chaos(data: object, path: str) -> Chaos:
    s = v.Section(data, path, keys(Chaos))
    d = Chaos()
    chaos = Chaos(
        actions=s.get("actions", _ACTIONS, d.actions),
        cut_s=s.get("cut_s", _CHAOS_S, d.cut_s),
        observe_s=s.get("observe_s", _CHAOS_S, d.observe_s),
        probe_timeout_s=s.get("probe_timeout_s", _CHAOS_S, d.probe_timeout_s),
        max_health_detect_s=s.get("max_health_detect_s", _CHAOS_S, d.max_health_detect_s),
        max_generation_detect_s=s.maybe("max_generation_detect_s", _CHAOS_S),
    )
    return s.built(chaos)
