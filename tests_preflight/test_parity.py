"""The parity matrix: every node runs the same stack, and the differences are shown as one table."""

import hashlib

import pytest

from infergate.checks.facts import docker_of, identity_of, image_id_of
from infergate.checks.parity import check_parity, differing, render_matrix
from infergate.fixtures.facts import every_node, settled, settled_every
from infergate.fixtures.report import fail_on_nodes, record
from infergate.reports.protocol import PARITY
from infergate.reports.summary import summary_row

pytestmark = [pytest.mark.image, pytest.mark.xdist_group("cluster")]
IN_IMAGE = ("vllm", "sglang", "transformers", "torch", "nccl", "ray")


def test_stack_identical_on_every_node(probes, in_image, model_hashes, inventory, request):
    """Driver, kernel, OS, Docker, image ID, the engine, transformers, torch and NCCL inside
    the image, the model's content and the engine environment are the same on every node."""
    nodes = [n.name for n in inventory.nodes]
    ident = every_node(probes, inventory, identity_of)
    seen = probes.every()
    matrix = {
        "kernel": {n: ident[n].kernel for n in nodes},
        "OS": {n: ident[n].os for n in nodes},
        "docker": {n: str(d.server) for n, d in every_node(probes, inventory, docker_of).items()},
        "driver": {
            n.name: summary_row(n, settled(seen[n.name]))["driver"] for n in inventory.nodes
        },
        "image ID": {n: str(i)[:19] for n, i in every_node(probes, inventory, image_id_of).items()},
    }
    versions = {n: o.part("versions") for n, o in settled_every(in_image).items()}
    for package in IN_IMAGE:
        matrix[f"{package} (image)"] = {n: str(versions[n].get(package)) for n in nodes}
    matrix["model sha256"] = {n: _manifest_digest(settled(model_hashes.of(node)).sha256)
                              for n, node in zip(nodes, inventory.nodes, strict=True)}  # fmt: skip
    for key in sorted(
        {k for node in inventory.nodes for k in {**inventory.engine.env, **node.env}}
    ):
        matrix[f"env {key}"] = {n.name: {**inventory.engine.env, **n.env}.get(key, "(unset)")
                                for n in inventory.nodes}  # fmt: skip
    record(request.node, None, PARITY, matrix)  # the preflight report's parity table
    problems = check_parity(matrix)
    fail_on_nodes(inventory.nodes, problems, header=render_matrix(differing(matrix), nodes))


def _manifest_digest(sha256: dict[str, str]) -> str:
    """One short digest of every file's name and SHA-256, to compare whole models."""
    lines = "".join(f"{name} {digest}\n" for name, digest in sorted(sha256.items()))
    return hashlib.sha256(lines.encode()).hexdigest()[:16]
