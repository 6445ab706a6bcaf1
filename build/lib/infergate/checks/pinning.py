"""Interface pinning: every interface, HCA and address the engine's environment names exists
on the node and lies on the fabric. The two-Spark report's TP=2 init hung forever
(docs/notes.md#two-spark-report): NCCL, Gloo and SGLang's ZMQ queue each pick their own
interface unless told (https://docs.vllm.ai/en/latest/usage/troubleshooting/, "Incorrect
network setup"; https://github.com/MiaAI-Lab/Qwen3.8-Flash-Next-Dual-DGX-Sparks/issues/3)."""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Network, ip_address

from infergate.checks.network import Interface
from infergate.engines.engine import Engine
from infergate.plan.model import Node
from infergate.problems import Problem

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
ADDRESS_VARS = ("VLLM_HOST_IP", "SGLANG_HOST_IP")
HCA_VAR = "NCCL_IB_HCA"


def required_pinning(engine: Engine, gpus: bool, rdma: bool) -> tuple[str, ...]:
    """The variables a multi-node plan of ENGINE must set so no socket picks its own way."""
    needed = ["GLOO_SOCKET_IFNAME", engine.host_ip_var]
    if gpus:
        needed.append("NCCL_SOCKET_IFNAME")
    if rdma:
        needed.append(HCA_VAR)
    return tuple(needed)


def check_pinning_planned(env: Mapping[str, str], needed: tuple[str, ...]) -> list[Problem]:
    """The plan sets every pinning variable its engine needs (a plan-only check)."""
    missing = [v for v in needed if v not in env]
    if not missing:
        return []
    return [
        Problem(
            found=f"engine.env lacks {', '.join(missing)}",
            planned=f"{', '.join(needed)} pinned to the fabric",
            remedy='add them to engine.env, e.g. GLOO_SOCKET_IFNAME: "{fabric_interface}", '
            'VLLM_HOST_IP / SGLANG_HOST_IP: "{fabric_ip}", NCCL_IB_HCA: both HCAs of the port',
        )
    ]


def check_pinning(
    env: Mapping[str, str],
    interfaces: Mapping[str, Interface],
    subnet: IPv4Network,
    hcas: set[str] | None,
    node: Node,
) -> list[Problem]:
    """Each name and address NODE's engine environment ENV uses exists here, on the fabric.
    `hcas` is the node's RDMA devices (None: the node has no /sys/class/infiniband). A remedy
    names the key that sets the variable: the node's own env, else engine.env."""
    problems = []
    for var in IFNAME_VARS:
        if var in env:
            key = node.key_of(f"env.{var}")
            problems += _check_ifnames(var, env[var], interfaces, subnet, key)
    for var in ADDRESS_VARS:
        if var in env:
            key = node.key_of(f"env.{var}")
            problems += _check_address(var, env[var], interfaces, subnet, key)
    if HCA_VAR in env:
        key = node.key_of(f"env.{HCA_VAR}")
        problems += _check_hcas(env[HCA_VAR], hcas or set(), node.fabric.hcas, key)
    return problems


def _on_fabric(iface: Interface, subnet: IPv4Network) -> bool:
    return any(a.ip in subnet for a in iface.addresses)


def _check_ifnames(
    var: str, value: str, interfaces: Mapping[str, Interface], subnet: IPv4Network, key: str
) -> list[Problem]:
    # an exclusion list: NCCL picks among the rest, nothing to check
    if value.startswith("^"):
        return []
    problems = []
    for name in filter(None, value.split(",")):
        exact = name.startswith("=") or var != "NCCL_SOCKET_IFNAME"  # NCCL matches prefixes
        name = name.lstrip("=")
        matches = [
            i for n, i in interfaces.items() if n == name or (not exact and n.startswith(name))
        ]
        if not matches:
            problems.append(
                Problem(
                    found=f"{var}={value}: no interface {name} "
                    f"(present: {', '.join(sorted(interfaces))})",
                    planned=f"{var} naming this node's fabric interface",
                    remedy=f'set {key} to the fabric interface: "{{fabric_interface}}"',
                )
            )
        elif not any(_on_fabric(i, subnet) for i in matches):
            problems.append(
                Problem(
                    found=f"{var}={value}: {name} has no address in {subnet}",
                    planned=f"{var} naming an interface on the fabric {subnet}",
                    remedy=f"point {key} at the interface that holds the node's fabric address",
                )
            )
    return problems


def _check_address(
    var: str, value: str, interfaces: Mapping[str, Interface], subnet: IPv4Network, key: str
) -> list[Problem]:
    try:
        address = ip_address(value)
    except ValueError:
        address = None
    holder = next(
        (n for n, i in interfaces.items() if any(a.ip == address for a in i.addresses)), None
    )
    if isinstance(address, IPv4Address) and address in subnet and holder:
        return []
    if not isinstance(address, IPv4Address):
        wrong = "not an IPv4 address"
    elif address not in subnet:
        wrong = f"not in the fabric {subnet}"
    else:
        wrong = "no interface of this node holds it"
    found = f"{var}={value}: " + wrong
    return [
        Problem(
            found=found,
            planned=f"{var} = this node's own fabric address",
            remedy=f'set {key}: "{{fabric_ip}}", so each node advertises its own',
        )
    ]


def _check_hcas(value: str, present: set[str], planned: tuple[str, ...], key: str) -> list[Problem]:
    if value.startswith("^"):
        return []
    named = {entry.lstrip("=").split(":")[0] for entry in value.split(",") if entry}
    problems = []
    absent = sorted(named - present)
    if absent:
        problems.append(
            Problem(
                found=f"{HCA_VAR}={value}: no RDMA device {', '.join(absent)} "
                f"(present: {', '.join(sorted(present)) or 'none'})",
                planned=f"{HCA_VAR} naming this node's HCAs",
                remedy=f"list the HCAs with `ibdev2netdev` and fix {key}",
            )
        )
    unlisted = [h for h in planned if h not in named]
    if unlisted:
        problems.append(
            Problem(
                found=f"{HCA_VAR}={value} leaves out {', '.join(unlisted)}",
                planned=f"every HCA of the port: {', '.join(planned)}",
                remedy=f"{key}: {','.join(planned)}; a Spark port is two PCIe x4 HCAs; with "
                "one, NCCL reaches ~3 GB/s instead of ~24 (dgx-spark-playbooks #102)",
            )
        )
    return problems
