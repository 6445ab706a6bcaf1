"""The parity matrix: every node runs the same stack, and the differences are shown as one table."""

import hashlib

import pytest

from infergate.checks.facts import docker_of, identity_of, image_id_of
from infergate.checks.parity import check_parity, differing, engine_env_rows, render_matrix, shown
from infergate.fixtures.facts import every_node, settled, settled_every
from infergate.fixtures.report import fail_on_nodes, record
from infergate.reports.protocol import PARITY
from infergate.reports.summary import summary_row

pytestmark = [pytest.mark.image, pytest.mark.xdist_group("cluster")]
IN_IMAGE = ("vllm", "sglang", "transformers", "torch", "nccl", "ray")


def test_stack_identical_on_every_node(probes, in_image, model_hashes, inventory, request):
    """Driver, kernel, OS, Docker, image ID, the engine, transformers, torch and NCCL inside
    the image, the model's content and the engine environment are the same on every node."""
    stack = _stack_matrix(probes, in_image, model_hashes, inventory)
    shown_rows = {**stack, **engine_env_rows(inventory)}
    record(request.node, None, PARITY, shown_rows)  # the report's parity table: each node's value
    judged = {**stack, **engine_env_rows(inventory, resolved=False)}
    fail_on_nodes(inventory.nodes, check_parity(judged), header=_table(judged, inventory))


def _stack_matrix(probes, in_image, model_hashes, inventory):
    """Each part of the stack, by node: the host's, the image's packages, the model."""
    nodes = [n.name for n in inventory.nodes]
    ident = every_node(probes, inventory.nodes, identity_of)
    seen = probes.every()
    matrix = {
        "kernel": {n: ident[n].kernel for n in nodes},
        "OS": {n: ident[n].os for n in nodes},
        "docker": {
            n: shown(d.server, "no answer")
            for n, d in every_node(probes, inventory.nodes, docker_of).items()
        },
        "driver": {
            n.name: summary_row(n, settled(seen[n.name]))["driver"] for n in inventory.nodes
        },
        "image ID": {
            n: str(i)[:19] for n, i in every_node(probes, inventory.nodes, image_id_of).items()
        },
    }
    versions = {n: o.part("versions") for n, o in settled_every(in_image).items()}
    for package in IN_IMAGE:
        matrix[f"{package} (image)"] = {n: shown(versions[n].get(package)) for n in nodes}
    matrix["model sha256"] = {
        n: _manifest_digest(settled(model_hashes.of(node)).sha256)
        for n, node in zip(nodes, inventory.nodes, strict=True)
    }
    return matrix


def _table(matrix, inventory):
    return render_matrix(differing(matrix), [n.name for n in inventory.nodes])


def _manifest_digest(sha256: dict[str, str]) -> str:
    """One short digest of every file's name and SHA-256, to compare whole models."""
    lines = "".join(f"{name} {digest}\n" for name, digest in sorted(sha256.items()))
    return hashlib.sha256(lines.encode()).hexdigest()[:16]
