"""The rules that tie inventory sections together, run once every section has parsed.

Each rule raises InventoryError at the most specific key path it can name, so that the
operator edits the line that is wrong rather than hunting for its partner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from infergate.plan.values import InventoryError, grouped

if TYPE_CHECKING:  # the model imports this module; at run time only attributes are read
    from infergate.plan.model import Inventory, Node


def check_plan(inv: Inventory) -> None:
    """Raise InventoryError for every cross-section rule the plan breaks (each rule's first
    break); the head's roles are judged only once the plan has a head."""
    problems: list[InventoryError] = []
    for rule in _RULES:
        if rule is _roles_match_head and any(e.path == "engine.dist_init_addr" for e in problems):
            continue
        try:
            rule(inv)
        except InventoryError as e:
            problems.append(e)
    if problems:
        raise grouped(problems)


_UNIQUE: tuple[tuple[str, str, Callable[[Node], object]], ...] = (
    ("name", "name", lambda n: n.name),
    ("address", "address", lambda n: n.address.lower()),  # DNS names ignore case
    ("fabric.address", "fabric address", lambda n: n.fabric.address.ip),
)


def _unique_per_node(inv: Inventory) -> None:
    """Two nodes with one name, address or fabric address are one machine listed twice."""
    for key, what, value_of in _UNIQUE:
        seen: dict[object, Node] = {}
        for node in inv.nodes:
            value = value_of(node)
            if value in seen:
                earlier = f"{seen[value].path} ({seen[value].name})"
                raise InventoryError(
                    node.key_of(key), f"{value} is already the {what} of {earlier}"
                )
            seen[value] = node


def _fabric_in_subnet(inv: Inventory) -> None:
    subnet = inv.fabric.subnet
    for node in inv.nodes:
        address = node.fabric.address
        if address.ip not in subnet or address.network.prefixlen != subnet.prefixlen:
            raise InventoryError(
                node.key_of("fabric.address"),
                f"{address} is not an address in fabric.subnet {subnet} "
                f"(both the address and the prefix length /{subnet.prefixlen} must match)",
            )


def _dist_init_is_a_node(inv: Inventory) -> None:
    """The rendezvous runs on the head; an address no node has would hang every rank."""
    wanted = inv.engine.dist_init_addr
    if any(n.fabric.address.ip == wanted for n in inv.nodes):
        return
    listed = ", ".join(f"{n.fabric.address.ip} ({n.name})" for n in inv.nodes)
    raise InventoryError(
        "engine.dist_init_addr",
        f"{wanted} is not the fabric address of any node; the nodes' fabric addresses: {listed}",
    )


def _one_head(inv: Inventory) -> None:
    heads = [n for n in inv.nodes if "head" in n.roles]
    if len(heads) > 1:
        first, second = heads[:2]
        raise InventoryError(
            second.key_of("roles"),
            f"{second.name} and {first.name} both have role head; only one node may",
        )


def _roles_match_head(inv: Inventory) -> None:
    """The head is whichever node holds dist_init_addr; roles may only agree with that."""
    head, addr = inv.head, inv.engine.dist_init_addr
    for node in inv.nodes:
        path = node.key_of("roles")
        if {"head", "worker"} <= node.roles:
            raise InventoryError(path, f"{node.name} cannot be both head and worker")
        if "head" in node.roles and node is not head:
            raise InventoryError(
                path,
                f"{node.name} has role head, but engine.dist_init_addr {addr} is the fabric "
                f"address of {head.name}: make {head.name} the head, or set dist_init_addr "
                f"to {node.fabric.address.ip}",
            )
        if "worker" in node.roles and node is head:
            raise InventoryError(
                path,
                f"{node.name} has role worker, but its fabric address is "
                f"engine.dist_init_addr {addr}, which makes it the head",
            )


def _one_kind_of_rank(inv: Inventory) -> None:
    """GPU nodes run a rank per GPU, CPU nodes one rank: engines cannot mix the two."""
    first = inv.nodes[0]
    for node in inv.nodes:
        if (node.gpus == 0) != (first.gpus == 0):
            raise InventoryError(
                node.key_of("gpus"),
                f"{node.name} has gpus {node.gpus} but {first.name} has gpus {first.gpus}; "
                "a plan has only GPU nodes or only CPU nodes (gpus 0)",
            )


def _world_size_matches(inv: Inventory) -> None:
    engine = inv.engine
    world = engine.tensor_parallel * engine.pipeline_parallel
    provided = sum(n.ranks for n in inv.nodes)
    if world == provided:
        return
    count = len(inv.nodes)
    nodes = "the 1 node provides" if count == 1 else f"the {count} nodes provide"
    raise InventoryError(
        "engine.tensor_parallel",
        f"tensor_parallel {engine.tensor_parallel} × pipeline_parallel "  # noqa: RUF001
        f"{engine.pipeline_parallel} = {world} ranks, but {nodes} {provided} "
        f"({_ranks_per_node(inv)})",
    )


def _ranks_per_node(inv: Inventory) -> str:
    ranks = {n.ranks for n in inv.nodes}
    if inv.nodes[0].gpus == 0:
        return "1 per node: gpus 0 means one CPU rank"
    if len(ranks) == 1:
        return f"{ranks.pop()} per node: one rank per GPU"
    return ", ".join(f"{n.name} {n.ranks}" for n in inv.nodes)


def _distinct_ports(inv: Inventory) -> None:
    engine = inv.engine
    if engine.api_port == engine.dist_init_port:
        raise InventoryError(
            "engine.api_port",
            f"{engine.api_port} is also engine.dist_init_port; the API server and the "
            "rendezvous cannot share a port on the head",
        )


def _jumps_end(inv: Inventory) -> None:
    """A nodes[].ssh.jump that names a node must lead, hop by hop, to a node reached directly."""
    by_name = {n.name: n for n in inv.nodes}
    for node in inv.nodes:
        seen = [node.name]
        hop = node.ssh.jump
        while hop in by_name:
            if hop in seen:
                chain = " -> ".join([*seen, hop])
                raise InventoryError(node.key_of("ssh.jump"), f"jump hosts loop: {chain}")
            seen.append(hop)
            hop = by_name[hop].ssh.jump


def _one_user_config(inv: Inventory) -> None:
    """ssh reads one ssh_config of the operator's for every host: nodes[].ssh.config turns it
    off for all nodes or for none."""
    reached = [n for n in inv.nodes if n.ssh.connection == "ssh"]
    for node in reached:
        if node.ssh.config != reached[0].ssh.config:
            raise InventoryError(
                node.key_of("ssh.config"),
                f"{str(node.ssh.config).lower()} here but {str(reached[0].ssh.config).lower()} "
                f"for {reached[0].path} ({reached[0].name}): one ssh_config serves every host; "
                "set it alike on every node",
            )


_RULES: tuple[Callable[[Inventory], None], ...] = (
    _unique_per_node,
    _fabric_in_subnet,
    _dist_init_is_a_node,
    _one_head,
    _roles_match_head,
    _one_kind_of_rank,
    _world_size_matches,
    _distinct_ports,
    _jumps_end,
    _one_user_config,
)
