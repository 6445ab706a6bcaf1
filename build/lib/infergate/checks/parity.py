"""The parity matrix: what must be the same on every node, side by side, and what is not.

Ray refuses a cluster whose nodes run different Ray versions; mismatched drivers, images or
NCCL builds fail later and more quietly (https://github.com/vllm-project/vllm/issues/4114,
https://github.com/vllm-project/vllm/issues/42354).
"""

from __future__ import annotations

from collections import Counter

from infergate.plan.model import Inventory
from infergate.problems import Problem

Matrix = dict[str, dict[str, str]]  # attribute -> node -> value


def shown(value: object, missing: str = "not found") -> str:
    """A value as the table shows it: MISSING where none was read, never Python's None."""
    return missing if value is None else str(value)


def engine_env_rows(inventory: Inventory, resolved: bool = True) -> Matrix:
    """The engine environment's rows, each node's value resolved (`{fabric_ip}` its own), or
    as planned: a placeholder that resolves per node is the same plan on every node."""
    envs = {
        n.name: inventory.node_env(n) if resolved else {**inventory.engine.env, **n.env}
        for n in inventory.nodes
    }
    keys = sorted({k for env in envs.values() for k in env})
    return {f"env {k}": {n: env.get(k, "(unset)") for n, env in envs.items()} for k in keys}


def differing(matrix: Matrix) -> Matrix:
    return {attr: row for attr, row in matrix.items() if len(set(row.values())) > 1}


def render_matrix(matrix: Matrix, nodes: list[str]) -> str:
    """The rows as a table, one column per node."""
    header = ["", *nodes]
    rows = [[attr, *(row.get(n, "?") for n in nodes)] for attr, row in matrix.items()]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    )


def check_parity(matrix: Matrix) -> dict[str, list[Problem]]:
    """Every attribute has one value on all nodes; the odd node (or, when no value has a
    majority, every node) is named with what the others have."""
    problems: dict[str, list[Problem]] = {}
    for attr, row in differing(matrix).items():
        counts = Counter(row.values())
        top, top_count = counts.most_common(1)[0]
        tied = list(counts.values()).count(top_count) > 1
        for node, value in row.items():
            if tied or value != top:
                others = sorted({v for n, v in row.items() if n != node})
                problems.setdefault(node, []).append(
                    Problem(
                        found=f"{attr} {value}",
                        planned=f"{attr} as on the other nodes: {', '.join(others)}",
                        remedy=f"make {attr} the same on every node (the table above shows "
                        "all of them)",
                    )
                )
    return problems
