"""The model: present, complete and byte-identical on every node."""

from pathlib import Path

import pytest

from infergate.checks.facts import model_of
from infergate.checks.model import (
    check_model_files,
    check_model_hashes,
    check_model_parity,
    parse_manifest,
)
from infergate.fixtures.facts import every_node, settled_every
from infergate.fixtures.report import fail_on, fail_on_nodes


def test_model_files_present(model_dir, node, inventory):
    """Every node has the model directory, every shard its index names, and a config.json
    that parses."""
    model = inventory.model
    fail_on(
        node,
        check_model_files(model.path, model_dir.files, model_dir.shards, model_dir.config_error),
    )


@pytest.mark.xdist_group("cluster")
def test_model_same_files_and_sizes_on_every_node(probes, answered):
    """Every node has the same model files with the same sizes."""
    seen = every_node(probes, answered, model_of)
    listings = {name: m.files for name, m in seen.items() if m.files is not None}
    fail_on_nodes(answered, check_model_parity(listings))


@pytest.mark.xdist_group("cluster")
def test_model_content_identical_on_every_node(model_hashes, inventory):
    """Every model file has the same SHA-256 on every node, and the manifest's when the plan
    names one (--model-hash=full hashes every byte again)."""
    hashes = {n: h.sha256 for n, h in settled_every(model_hashes.every()).items()}
    manifest = inventory.model.manifest
    expected = parse_manifest(Path(manifest).read_text()) if manifest else None
    fail_on_nodes(inventory.nodes, check_model_hashes(hashes, expected))
