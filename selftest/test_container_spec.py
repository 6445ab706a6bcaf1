"""The preflight's probe container is the launch's container: for every engine kind, with
and without HCAs, the two `docker run` lines differ only in the command and the options
that are each one's own (name, labels, `-d` or `--rm`). Every run is `--pull=never`, and
by image ID where the plan pins one. Pure: the command lines are compared, nothing runs."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.deploy.engines import plan_launch
from infergate.deploy.launch import Start
from infergate.fixtures.inimage import _command
from infergate.inventory import Inventory, Node, parse_inventory

INVENTORIES = Path(__file__).resolve().parents[1] / "inventories"
PLANS = {"vllm": "two-sparks-vllm.yaml", "sglang": "two-sparks-sglang.yaml",
         "vllm-ray": "two-sparks-vllm-ray.yaml"}  # fmt: skip
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


def run_line(command: str) -> list[str]:
    """The words of a node's shell command from its one `docker run` on (the probe's
    script, quoted, spans lines: the options and the image come before it)."""
    (at,) = [i for i, line in enumerate(command.splitlines()) if line.startswith("docker run ")]
    return shlex.split("\n".join(command.splitlines()[at:]))[2:]


def shared(words: list[str], own_flags: set[str], own_pairs: set[str]) -> list[str]:
    """Options and image of a `docker run` (up to the command), without the use's own."""
    at = words.index("$ep")
    options, kept, skip = words[:at], [], False
    for word in options:
        if skip:
            skip = False
        elif word in own_pairs:
            skip = True
        elif word not in own_flags:
            kept.append(word)
    return [*kept, *words[at : at + 2]]  # $ep and the image


def probe_command(inventory: Inventory, node: Node, rank: int, label: str, reuse: bool) -> str:
    return _command(inventory, node, rank, label, reuse)[0]


def launch_starts(inventory: Inventory) -> list[Start]:
    return [s for s in plan_launch(inventory, "run1").steps if isinstance(s, Start)]


@pytest.mark.parametrize("hcas", [True, False], ids=["hcas", "no-hcas"])
@pytest.mark.parametrize("kind", list(PLANS))
def test_probe_container_is_the_launch_container(kind: str, hcas: bool) -> None:
    inventory = plan(kind, hcas)
    for rank, start in enumerate(launch_starts(inventory)):
        node = next(n for n in inventory.nodes if n.name == start.node)
        probe = run_line(probe_command(inventory, node, rank, "label1", True))
        launch = run_line(start.command)
        assert shared(probe, {"--rm"}, {"--label"}) == shared(
            launch, {"-d"}, {"--name", "--label"}
        ), node.name
        # the same env, sent as the command's standard input (docker run --env-file)
        assert _command(inventory, node, rank, "label1", True)[1] == start.input, node.name
        assert ("--device" in launch) == hcas
        assert ("memlock=-1" in launch) == hcas
        assert " ".join(EXTRA) in " ".join(launch)


def test_probe_differs_only_in_its_command_and_label() -> None:
    inventory = plan("vllm", hcas=True)
    node = inventory.head
    words = run_line(probe_command(inventory, node, 0, "label1", True))
    at = words.index("$ep")
    assert words[:3] == ["--rm", "--label", "infergate.preflight=label1"]
    # the rendezvous address is the command's, not the container's environment
    assert words[at + 2 : at + 5] == ["env", "MASTER_ADDR=192.168.200.12", "MASTER_PORT=29501"]
    assert not any(w.startswith("MASTER_") for w in words[:at])


@pytest.mark.parametrize("kind", list(PLANS))
def test_every_run_never_pulls_and_runs_the_pinned_id(kind: str) -> None:
    inventory = plan(kind, hcas=True, image_id=IMAGE_ID)
    lines = [run_line(s.command) for s in launch_starts(inventory)]
    lines += [run_line(probe_command(inventory, n, i, "l", True)) for i, n in enumerate(
        inventory.nodes)]  # fmt: skip
    for words in lines:
        assert "--pull=never" in words[: words.index("$ep")]
        assert words[words.index("$ep") + 1] == IMAGE_ID


def test_without_a_pinned_id_the_ref_runs_never_pulled() -> None:
    inventory = plan("sglang", hcas=True)
    (head, _) = (run_line(s.command) for s in launch_starts(inventory))
    assert head[head.index("$ep") + 1] == inventory.image.ref
    assert "--pull=never" in head
