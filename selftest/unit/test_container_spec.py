"""The preflight's probe container is the engine's container (docker_cli.engine_container),
the one the launch runs: for every engine kind, with and without HCAs, only its command
differs. Its create arguments carry the plan's docker_args, the HCAs where the plan names
them, and the image by ID where the plan pins one. Pure: the specs and arguments are
compared, nothing runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.engines.registry import engine_for
from infergate.plan.model import Inventory, parse_inventory
from infergate.preflight.in_image import _probe

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
PLANS = {
    "vllm": "two-sparks-vllm.yaml",
    "sglang": "two-sparks-sglang.yaml",
    "vllm-ray": "two-sparks-vllm-ray.yaml",
}
EXTRA = ["-v", "/srv/cache:/root/.cache", "--ulimit", "nofile=65536:65536", "--shm-size", "8g"]
IMAGE_ID = "sha256:" + "ab" * 32


def plan(kind: str, hcas: bool, image_id: str | None = None) -> Inventory:
    data: dict[str, Any] = yaml.safe_load((INVENTORIES / PLANS[kind]).read_text())
    for node in data["nodes"]:
        if not hcas:
            node["fabric"].pop("hcas", None)
    data["engine"]["docker_args"] = EXTRA
    if image_id:
        data["image"]["id"] = image_id
    return parse_inventory(data)


@pytest.mark.parametrize("hcas", [True, False], ids=["hcas", "no-hcas"])
@pytest.mark.parametrize("kind", list(PLANS))
def test_probe_container_is_the_engine_container(kind: str, hcas: bool) -> None:
    inventory = plan(kind, hcas)
    for rank, node in enumerate(inventory.nodes):
        spec = _probe(inventory, node, rank)[0]
        assert spec == engine_for(inventory).container(inventory, node), node.name
        kwargs = spec.create_kwargs()
        assert ("devices" in kwargs) == hcas
        assert [u.name for u in kwargs.get("ulimits", [])] == ["memlock"] * hcas + ["nofile"]
        assert "/srv/cache:/root/.cache" in kwargs["volumes"]
        assert kwargs["shm_size"] == "8g"
        assert (kwargs["network_mode"], kwargs["ipc_mode"]) == ("host", "host")


def test_the_rendezvous_address_is_the_probes_command_not_the_containers_env() -> None:
    inventory = plan("vllm", hcas=True)
    spec, args, master = _probe(inventory, inventory.head, 0)
    assert master == {
        "MASTER_ADDR": "192.168.200.12",
        "MASTER_PORT": "29501",
        "INFERGATE_SWEEP_MAX_BYTES": str(2**30),  # fabric.collective_max_mib's default
    }
    assert not any(key.startswith(("MASTER_", "INFERGATE_")) for key, _ in spec.env)
    engine = '{"imports": ["vllm"], "registry": "vllm", "parser": "vllm_parser", "model_flag": ""}'
    assert args[:5] == [engine, inventory.model.path, "0", "2", "60"]


@pytest.mark.parametrize("kind", list(PLANS))
def test_every_probe_runs_the_pinned_id(kind: str) -> None:
    inventory = plan(kind, hcas=True, image_id=IMAGE_ID)
    assert {_probe(inventory, n, i)[0].image for i, n in enumerate(inventory.nodes)} == {IMAGE_ID}


def test_without_a_pinned_id_the_ref_runs() -> None:
    inventory = plan("sglang", hcas=True)
    assert _probe(inventory, inventory.head, 0)[0].image == inventory.image.ref
