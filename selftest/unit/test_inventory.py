"""The inventory parser: the lab plan parses as written; every mistake is named by its key path.

Bad inventories are small mutations of inventories/lab.yaml, so each case shows exactly
which edit an operator could make and what the parser says back.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.plan.model import (
    PLACEHOLDERS,
    InventoryError,
    Ssh,
    Thresholds,
    flag_value,
    flag_values,
    parse_inventory,
)

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
LAB: dict[str, Any] = yaml.safe_load((INVENTORIES / "lab.yaml").read_text())
DELETE = object()  # as a change's value: remove the key (or list item)


def _steps(path: str) -> list[str | int]:
    """`nodes[1].fabric.address` -> ["nodes", 1, "fabric", "address"]."""
    parts = re.findall(r"\[(\d+)\]|([^.\[\]]+)", path)
    return [int(index) if index else key for index, key in parts]


def lab_with(*changes: tuple[str, object]) -> dict[str, Any]:
    """A deep copy of the lab plan with each (key path, new value) change applied."""
    data = copy.deepcopy(LAB)
    for path, value in changes:
        *parents, last = _steps(path)
        target: Any = data
        for step in parents:
            target = target[step]
        if value is DELETE:
            del target[last]
        else:
            target[last] = value
    return data


# --- the good plan ---------------------------------------------------------------------


def test_lab_inventory_parses_into_the_planned_model() -> None:
    inv = parse_inventory(copy.deepcopy(LAB))
    assert inv.name == "lab"
    assert [n.name for n in inv.nodes] == ["node1", "node2"]
    assert inv.head.name == "node1"
    assert inv.nodes[0].roles == frozenset({"head"})
    assert inv.nodes[1].fabric.address == IPv4Interface("10.252.0.12/24")
    assert inv.nodes[1].fabric.interface == "fab0"  # from fabric.interface
    assert inv.nodes[0].ssh.key == "/var/lib/infergate-lab/ssh/id_ed25519"
    assert inv.nodes[0].ssh.port == 22
    assert inv.engine.kind == "vllm"
    assert inv.engine.dist_init_addr == IPv4Address("10.252.0.11")
    assert inv.engine.flags == ("--max-model-len", "1024", "--distributed-timeout-seconds", "60")
    assert inv.fabric.mtu == 1500
    assert inv.thresholds.command_timeout_s == 20.0


def test_lab_node_env_resolves_placeholders_per_node() -> None:
    inv = parse_inventory(copy.deepcopy(LAB))
    assert inv.node_env(inv.nodes[1]) == {
        "VLLM_HOST_IP": "10.252.0.12",
        "GLOO_SOCKET_IFNAME": "fab0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_ENDPOINT": "http://10.252.0.11:9",  # {head_fabric_ip}
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "1",  # {node_index}: node2 is the second node
    }


def test_lab_mem_needed_is_weight_share_plus_kv_and_headroom() -> None:
    inv = parse_inventory(copy.deepcopy(LAB))
    # 0.27 GiB of weights over 2 CPU ranks, + kv_cache_gib 1 + memory_headroom_gib 2
    assert inv.mem_needed_gib(inv.nodes[0]) == pytest.approx(0.135 + 1 + 2)


def test_min_mem_available_overrides_the_computed_need() -> None:
    inv = parse_inventory(lab_with(("thresholds.min_mem_available_gib", 50)))
    assert inv.mem_needed_gib(inv.nodes[1]) == 50.0


def test_model_hash_timeout_is_read_from_the_plan() -> None:
    inv = parse_inventory(lab_with(("thresholds.model_hash_timeout_s", 7200)))
    assert inv.thresholds.model_hash_timeout_s == 7200.0
    assert Thresholds().model_hash_timeout_s == 3600.0  # the hour the hash always had


def test_optional_keys_take_their_defaults() -> None:
    data = lab_with(
        ("thresholds", DELETE),
        ("engine.flags", DELETE),
        ("engine.env", DELETE),
        ("engine.tensor_parallel", DELETE),
        ("nodes[0].ssh", DELETE),
        ("nodes[1].roles", DELETE),
    )
    inv = parse_inventory(data)
    assert inv.thresholds == Thresholds()
    assert inv.engine.flags == ()
    assert inv.engine.env == {}
    assert inv.engine.tensor_parallel == 1
    assert inv.nodes[0].ssh == Ssh()
    assert inv.nodes[1].roles == frozenset()
    assert inv.nodes[1].gpus == 0
    assert inv.image.id is None


def test_env_accepts_ints_literal_braces_and_node_overrides() -> None:
    data = lab_with(
        ("engine.env.NCCL_IB_DISABLE", 0),
        ("engine.env.BRACED", "{{literal}}-{node_name}-{head_fabric_ip}"),
        ("nodes[1].env", {"VLLM_CPU_KVCACHE_SPACE": "2"}),
    )
    inv = parse_inventory(data)
    env = inv.node_env(inv.nodes[1])
    assert env["NCCL_IB_DISABLE"] == "0"
    assert env["BRACED"] == "{literal}-node2-10.252.0.11"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"  # the node's own value wins


def test_node_address_may_be_a_dns_name_and_interface_may_be_overridden() -> None:
    data = lab_with(("nodes[1].address", "node2.lab.example"), ("nodes[1].fabric.interface", "e1"))
    inv = parse_inventory(data)
    assert inv.nodes[1].address == "node2.lab.example"
    assert inv.nodes[1].fabric.interface == "e1"
    assert inv.nodes[1].where == "node2 (node2.lab.example)"


def test_two_sparks_reach_spark2_through_spark1_as_the_seeds_did() -> None:
    inv = parse_inventory(yaml.safe_load((INVENTORIES / "two-sparks-sglang.yaml").read_text()))
    assert inv.nodes[1].ssh.jump == "spark1"
    assert inv.nodes[0].ssh.jump is None
    assert inv.nodes[1].ssh.hops == ("aurora@10.1.230.180:22",)
    assert inv.nodes[1].ssh_argv("docker", "load") == [
        "ssh",
        "-p",
        "22",
        "-J",
        "aurora@10.1.230.180:22",
        "aurora@192.168.200.13",
        "docker load",
    ]


def test_ssh_argv_follows_every_hop_and_names_the_plans_key_and_known_hosts() -> None:
    """node2 through node1 through a bastion: -J lists the hops from this controller on; the
    remote command is quoted once more for the node's shell."""
    inv = parse_inventory(
        lab_with(
            ("nodes[0].ssh.jump", "ops@bastion.example:2222"),
            ("nodes[0].ssh.port", 2201),
            ("nodes[0].ssh.user", "aurora"),
            ("nodes[1].ssh.jump", "node1"),
            ("nodes[1].ssh.key", "/keys/my key"),
        )
    )
    assert inv.nodes[1].ssh_argv("docker", "save", "img:1") == [
        "ssh",
        "-p",
        "22",
        "-i",
        "/keys/my key",
        "-o",
        "UserKnownHostsFile=/var/lib/infergate-lab/ssh/known_hosts",
        "-J",
        "ops@bastion.example:2222,aurora@10.251.0.11:2201",
        "root@10.251.0.12",
        "docker save img:1",
    ]
    assert inv.nodes[0].ssh.hops == ("ops@bastion.example:2222",)


def test_ssh_argv_of_the_controller_itself_is_the_command_alone() -> None:
    inv = parse_inventory(lab_with(("nodes[0].ssh", {"connection": "local"})))
    assert inv.nodes[0].ssh_argv("docker", "load") == ["docker", "load"]


def test_an_ipv6_jump_node_is_bracketed_for_ssh_j() -> None:
    inv = parse_inventory(
        lab_with(("nodes[0].address", "fd00::11"), ("nodes[1].ssh.jump", "node1"))
    )
    assert inv.nodes[1].ssh.hops == ("root@[fd00::11]:22",)


def test_gpu_nodes_provide_one_rank_per_gpu() -> None:
    data = lab_with(("nodes[0].gpus", 2), ("nodes[1].gpus", 2), ("engine.tensor_parallel", 2))
    inv = parse_inventory(data)
    assert sum(n.ranks for n in inv.nodes) == 4


@pytest.mark.parametrize("path", sorted(INVENTORIES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_inventory_parses(path: Path) -> None:
    inv = parse_inventory(yaml.safe_load(path.read_text()))
    assert inv.head in inv.nodes
    for node in inv.nodes:
        assert inv.node_env(node) is not None
        assert inv.mem_needed_gib(node) > 0


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_two_sparks_plans_follow_the_spark_sources(engine: str) -> None:
    inv = parse_inventory(yaml.safe_load((INVENTORIES / f"two-sparks-{engine}.yaml").read_text()))
    spark1, spark2 = inv.nodes
    assert inv.head is spark1
    assert spark2.fabric.hcas == ("rocep1s0f1", "roceP2p1s0f1")
    env = inv.node_env(spark2)
    assert env[f"{engine.upper()}_HOST_IP"] == "192.168.200.13"
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    # docs/notes.md#sizing: 118.5 GiB / 2 ranks + 20 KV + 10 headroom
    assert inv.mem_needed_gib(spark2) == pytest.approx(89.25)


# --- bad plans: one mutation each, the exact key path and a telling part of the message ----

KNOWN = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)


def bad(case_id: str, path: str, value: object, says: str) -> Any:
    """A case that sets one key and expects the error at that same key."""
    return pytest.param([(path, value)], path, says, id=case_id)


def bad_at(case_id: str, changes: list[tuple[str, object]], at: str, says: str) -> Any:
    """A case whose changes are reported at another key (`at`), as cross-field rules are."""
    return pytest.param(changes, at, says, id=case_id)


BAD = [
    bad("top-unknown-key", "nodez", [], "unknown key; known keys: allow, "),
    bad("top-name-missing", "name", DELETE, "required key is missing"),
    bad("top-name-int", "name", 5, "expected a string, got 5 (int)"),
    bad("top-name-blank", "name", "  ", "must not be empty"),
    bad("nodes-missing", "nodes", DELETE, "required key is missing"),
    bad("nodes-empty", "nodes", [], "at least 1 item"),
    bad("nodes-not-list", "nodes", {"node1": {}}, "expected a list, got {'node1'"),
    bad("node-not-mapping", "nodes[0]", "node1", "expected a mapping, got 'node1'"),
    bad("node-int-key", "nodes[0]", {1: "x"}, "keys must be strings, got 1 (int)"),
    bad("node-unknown-key", "nodes[1].gpu", 1, "known keys: address, env,"),
    bad("node-name-bad", "nodes[0].name", "-node1", "not a valid node name"),
    bad("node-name-space", "nodes[1].name", "node 2", "'node 2' is not a"),
    bad("node-address-missing", "nodes[1].address", DELETE, "required key"),
    bad("node-address-bad", "nodes[1].address", "10.251.0", "neither an IP"),
    bad("node-address-dns-bad", "nodes[1].address", "a_b.lab", "DNS name"),
    bad("roles-not-list", "nodes[0].roles", "head", "expected a list, got 'h"),
    bad("roles-null", "nodes[0].roles", None, "expected a list, got null"),
    bad("role-unknown", "nodes[0].roles[0]", "master", "'master' is not one of head, worker"),
    bad("ssh-port-str", "nodes[0].ssh.port", "abc", "expected an integer, got 'abc' (str)"),
    bad("ssh-port-bool", "nodes[0].ssh.port", True, "got True (bool)"),
    bad("ssh-port-range", "nodes[1].ssh.port", 70000, "between 1 and 65535"),
    bad("ssh-port-zero", "nodes[1].ssh.port", 0, "0 is out of range"),
    bad("ssh-verify-str", "nodes[0].ssh.verify_host_key", "yes", "a boolean"),
    bad("ssh-key-int", "nodes[0].ssh.key", 5, "expected a string, got 5"),
    bad("ssh-user-null", "nodes[0].ssh.user", None, "got null"),
    bad(
        "ssh-unknown",
        "nodes[0].ssh.identity",
        "k",
        "known keys: config, connection, jump, key, known_hosts, port, user, verify_host_key",
    ),
    bad("ssh-not-mapping", "nodes[0].ssh", "root@x", "expected a mapping"),
    bad(
        "nfabric-typo",
        "nodes[1].fabric.interfce",
        "e1",
        "unknown key; known keys: address, hcas, interface",
    ),
    bad("nfabric-missing", "nodes[1].fabric", DELETE, "required key is missing"),
    bad("nfabric-no-prefix", "nodes[0].fabric.address", "10.252.0.11", "with prefix"),
    bad("nfabric-garbage", "nodes[0].fabric.address", "x/24", "'x/24'"),
    bad("nfabric-ifname-long", "nodes[0].fabric.interface", "enP2p1s0f1np1xyz", "1-15 characters"),
    bad_at(
        "nfabric-hca-int",
        [("nodes[0].fabric.hcas", ["mlx5_0", 1])],
        "nodes[0].fabric.hcas[1]",
        "expected a string, got 1 (int)",
    ),
    bad("gpus-negative", "nodes[0].gpus", -1, "-1 is out of range; expected between 0 and 64"),
    bad("gpus-float", "nodes[0].gpus", 1.5, "expected an integer, got 1.5"),
    bad_at(
        "nenv-bool",
        [("nodes[0].env", {"FOO": True})],
        "nodes[0].env.FOO",
        "expected a string (or an integer), got True (bool)",
    ),
    bad_at("nenv-float", [("nodes[0].env", {"FOO": 0.85})], "nodes[0].env.FOO", "got 0.85 (float)"),
    bad_at("nenv-null", [("nodes[0].env", {"FOO": None})], "nodes[0].env.FOO", "got null"),
    bad_at("nenv-list", [("nodes[0].env", {"FOO": ["a"]})], "nodes[0].env.FOO", "got ['a'] (list)"),
    bad_at(
        "nenv-key",
        [("nodes[0].env", {"1FOO": "x"})],
        "nodes[0].env.1FOO",
        "not an environment variable name",
    ),
    bad("fabric-missing", "fabric", DELETE, "required key is missing"),
    bad("fabric-interface-missing", "fabric.interface", DELETE, "required"),
    bad("fabric-interface-slash", "fabric.interface", "fab/0", "no spaces, '/'"),
    bad("fabric-subnet-host-bits", "fabric.subnet", "10.252.0.1/24", "did you mean 10.252.0.0/24?"),
    bad("fabric-subnet-v6", "fabric.subnet", "fd00::/64", "not an IPv4 subnet"),
    bad("fabric-mtu-small", "fabric.mtu", 100, "between 576 and 9216"),
    bad("fabric-mtu-str", "fabric.mtu", "1500", "expected an integer, got '1500'"),
    bad(
        "fabric-rate-zero", "fabric.rate_gbps", 0, "expected greater than 0 and at most 10000 Gb/s"
    ),
    bad("fabric-min-gbps-str", "fabric.min_gbps", "100G", "expected a number, got '100G'"),
    bad("image-ref-missing", "image.ref", DELETE, "required key is missing"),
    bad("image-id-bad", "image.id", "sha256:abc", "not an image ID like sha256:"),
    bad("image-id-upper", "image.id", "sha256:" + "A" * 64, "sha256:<64 hex>"),
    bad("model-path-relative", "model.path", "models/x", "not an absolute path"),
    bad("model-served-missing", "model.served_name", DELETE, "required"),
    bad("model-size-zero", "model.size_gib", 0, "expected greater than 0"),
    bad("model-size-nan", "model.size_gib", float("nan"), "finite number"),
    bad("model-size-str", "model.size_gib", "119G", "expected a number, got '119G'"),
    bad("model-size-huge-int", "model.size_gib", 10**400, "10000000000000000... (401 digits)"),
    bad("model-unknown", "model.sha", "x", "known keys: manifest, path, served_name, size_gib"),
    bad("engine-kind", "engine.kind", "trtllm", "'trtllm' is not one of sglang, vllm, vllm-ray"),
    bad("engine-api-port-missing", "engine.api_port", DELETE, "required key is missing"),
    bad("engine-dist-port-bool", "engine.dist_init_port", True, "expected an integer, got True"),
    bad("engine-tp-zero", "engine.tensor_parallel", 0, "expected between 1 and 4096"),
    bad("engine-pp-str", "engine.pipeline_parallel", "2", "an integer"),
    bad(
        "engine-dist-addr-prefix", "engine.dist_init_addr", "10.252.0.11/24", "not an IPv4 address"
    ),
    bad("engine-flag-int", "engine.flags[1]", 1024, "got 1024 (int); quote it"),
    bad("engine-flags-str", "engine.flags", "--enforce-eager", "expected a list"),
    bad("eenv-list", "engine.env.VLLM_HOST_IP", ["a"], "expected a string"),
    bad(
        "eenv-unknown-placeholder",
        "engine.env.VLLM_HOST_IP",
        "{fabric_address}",
        f"unknown placeholder {{fabric_address}} in '{{fabric_address}}'; "
        f"known placeholders: {KNOWN}",
    ),
    bad("eenv-open-brace", "engine.env.VLLM_HOST_IP", "{fabric_ip", "malformed placeholder"),
    bad(
        "eenv-close-brace",
        "engine.env.GLOO_SOCKET_IFNAME",
        "fab}",
        "known placeholders: {fabric_ip}",
    ),
    bad("eenv-positional", "engine.env.VLLM_HOST_IP", "{}", "unknown placeholder {}"),
    bad(
        "eenv-conversion",
        "engine.env.VLLM_HOST_IP",
        "{fabric_ip!r}",
        "unknown placeholder {fabric_ip!r}",
    ),
    bad(
        "eenv-attribute",
        "engine.env.VLLM_HOST_IP",
        "{fabric_ip.x}",
        "unknown placeholder {fabric_ip.x}",
    ),
    bad("eenv-not-mapping", "engine.env", ["A=1"], "expected a mapping"),
    bad("thr-kv-negative", "thresholds.kv_cache_gib", -1, "expected between 0 and 65536 GiB"),
    bad("thr-timeout-zero", "thresholds.command_timeout_s", 0, "expected between 1 and 3600 s"),
    bad("thr-hash-timeout-zero", "thresholds.model_hash_timeout_s", 0, "between 1 and 86400 s"),
    bad("thr-endpoint-wait-long", "thresholds.endpoint_wait_s", 3601, "between 0 and 3600 s"),
    bad("thr-endpoint-wait-negative", "thresholds.endpoint_wait_s", -1, "between 0 and 3600 s"),
    bad("thr-min-mem-zero", "thresholds.min_mem_available_gib", 0, "greater than 0"),
    bad("thr-bool", "thresholds.connect_timeout_s", True, "expected a number, got True"),
    bad("thr-unknown", "thresholds.kv_gib", 1, "unknown key"),
    # cross-field rules
    bad("dup-name", "nodes[1].name", "node1", "node1 is already the name of nodes[0]"),
    bad(
        "dup-address",
        "nodes[1].address",
        "10.251.0.11",
        "10.251.0.11 is already the address of nodes[0] (node1)",
    ),
    bad(
        "dup-fabric",
        "nodes[1].fabric.address",
        "10.252.0.11/24",
        "10.252.0.11 is already the fabric address of nodes[0] (node1)",
    ),
    bad(
        "fabric-outside-subnet",
        "nodes[1].fabric.address",
        "10.253.0.12/24",
        "10.253.0.12/24 is not an address in fabric.subnet 10.252.0.0/24",
    ),
    bad("fabric-prefix-differs", "nodes[1].fabric.address", "10.252.0.12/16", "prefix length /24"),
    bad(
        "dist-init-no-node",
        "engine.dist_init_addr",
        "10.252.0.99",
        "10.252.0.99 is not the fabric address of any node; "
        "the nodes' fabric addresses: 10.252.0.11 (node1), 10.252.0.12 (node2)",
    ),
    bad("two-heads", "nodes[1].roles", ["head"], "node2 and node1 both have role head"),
    bad_at(
        "head-not-dist-init",
        [("nodes[0].roles", []), ("nodes[1].roles", ["head"])],
        "nodes[1].roles",
        "node2 has role head, but engine.dist_init_addr 10.252.0.11 is the fabric address of node1",
    ),
    bad("head-and-worker", "nodes[0].roles", ["head", "worker"], "cannot be both head and worker"),
    bad(
        "worker-on-dist-init",
        "nodes[0].roles",
        ["worker"],
        "node1 has role worker, but its fabric address is engine.dist_init_addr",
    ),
    bad_at(
        "world-size-cpu",
        [("engine.tensor_parallel", 4), ("engine.pipeline_parallel", 1)],
        "engine.tensor_parallel",
        "tensor_parallel 4 \N{MULTIPLICATION SIGN} pipeline_parallel 1 = 4 ranks, "
        "but the 2 nodes provide 2 (1 per node: gpus 0 means one CPU rank)",
    ),
    bad_at(
        "world-size-gpu",
        [("nodes[0].gpus", 2), ("nodes[1].gpus", 2)],
        "engine.tensor_parallel",
        "= 2 ranks, but the 2 nodes provide 4 (2 per node: one rank per GPU)",
    ),
    bad_at(
        "world-size-uneven",
        [("nodes[0].gpus", 1), ("nodes[1].gpus", 2)],
        "engine.tensor_parallel",
        "provide 3 (node1 1, node2 2)",
    ),
    bad_at(
        "world-size-one-node",
        [("nodes", [LAB["nodes"][0]])],
        "engine.tensor_parallel",
        "but the 1 node provides 1",
    ),
    bad("mixed-cpu-gpu", "nodes[1].gpus", 1, "node2 has gpus 1 but node1 has gpus 0"),
    bad("api-port-is-dist-port", "engine.api_port", 29501, "29501 is also engine.dist_init_port"),
    pytest.param(
        [("nodes[0].ssh", {"jump": "node1"})],
        "nodes[0].ssh.jump",
        "jump hosts loop: node1 -> node1",
        id="jump-to-itself",
    ),
    pytest.param(
        [("nodes[0].ssh", {"jump": "node2"}), ("nodes[1].ssh", {"jump": "node1"})],
        "nodes[0].ssh.jump",
        "jump hosts loop: node1 -> node2 -> node1",
        id="jump-loop",
    ),
    bad("ratio-above-one", "thresholds.tp_balance_min_ratio", 1.5, "greater than 0 and at most 1"),
    bad_at("allow-unknown", [("allow", {"pods": []})], "allow.pods", "known keys: containers, "),
    bad_at("allow-str", [("allow", {"containers": "x"})], "allow.containers", "expected a list"),
]


@pytest.mark.parametrize(("changes", "path", "fragment"), BAD)
def test_bad_inventory_is_named_by_key_path(
    changes: list[tuple[str, object]], path: str, fragment: str
) -> None:
    with pytest.raises(InventoryError) as caught:
        parse_inventory(lab_with(*changes))
    assert caught.value.path == path
    assert str(caught.value).startswith(f"{path}: ")
    assert fragment in str(caught.value)


WAITS_OF_ZERO = ("endpoint_wait_s",)


@pytest.mark.parametrize("key", [f.name for f in dataclasses.fields(Thresholds)])
def test_every_threshold_has_bounds_that_its_message_names(key: str) -> None:
    """`command_timeout_s: 1.0e-9` killed every command: no threshold takes any number.
    A wait of 0 is one try (endpoint_wait_s): only a negative one is out of range."""
    tiny = 1e-9 if key.endswith("_s") and key not in WAITS_OF_ZERO else -1
    for value in (tiny, 10**9):  # an integer: integer keys (dcgm_diag_level) refuse a float
        with pytest.raises(InventoryError, match=r"is out of range; expected .* and .*\d") as e:
            parse_inventory(lab_with((f"thresholds.{key}", value)))
        assert e.value.path == f"thresholds.{key}"


@pytest.mark.parametrize("data", [None, [], "lab", 3], ids=["null", "list", "str", "int"])
def test_root_must_be_a_mapping(data: object) -> None:
    with pytest.raises(InventoryError, match=r"^<root>: expected a mapping, got ") as caught:
        parse_inventory(data)
    assert caught.value.path == "<root>"


def test_inventory_error_is_a_value_error_with_its_path() -> None:
    error = InventoryError("engine.api_port", "required key is missing")
    assert isinstance(error, ValueError)
    assert str(error) == "engine.api_port: required key is missing"


def test_engine_flags_read_in_both_forms_the_last_one_winning():
    flags = ("--max-model-len", "4096", "--enforce-eager", "--max-model-len=8192", "--tokenizer")
    assert flag_values(flags, "--max-model-len") == [
        ("--max-model-len", "4096"),
        ("--max-model-len", "8192"),
    ]
    assert flag_value(flags, "--max-model-len") == "8192"
    assert flag_values(flags, "--tokenizer") == [("--tokenizer", None)]
    assert flag_value(flags, "--context-length") is None
