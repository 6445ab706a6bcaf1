"""The Docker Engine API of the lab's real nodes, reached as the suite reaches it: each node's
socket forwarded over the real SSH master (the lab's sshd, its DOCKER_HOST set by sshd's
SetEnv), a container created, run, read and removed through it, the forward gone after."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from infergate.checks.inimage import body, check_all_reduce
from infergate.engines.container import ContainerSpec
from infergate.fixtures.inventory import load_inventory
from infergate.plan.model import Inventory, Node, parse_inventory
from infergate.preflight.in_image import InImage, probe_on_node
from infergate.remote.docker_api import EngineUnreachable, node_engine, run_to_exit
from infergate.remote.ssh_config import ssh_config
from infergate.waiting import Deadline
from infergate_lab import layout
from infergate_lab.docker import LAB_IMAGE

# the last test may wait for the engine image to be loaded onto the nodes: past the backstop
pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]

SECRET = "hf_forwarded_secret_4e1c"
LABEL = {"infergate.selftest": "docker-api-lab"}


@pytest.fixture
def plan(lab) -> Inventory:
    return load_inventory(layout.INVENTORY_FILE)


@pytest.fixture
def config(plan: Inventory) -> Iterator[Path]:
    """The suite's ssh_config for the lab in a short private directory; masters ended after."""
    with tempfile.TemporaryDirectory(prefix="ig-api-") as tmp:
        path = Path(tmp, "ssh_config")
        path.write_text(ssh_config(plan, Path(tmp), persist_s=30, plan_known_hosts=Path(tmp, "kh")))
        yield path
        for node in plan.nodes:
            end = ["ssh", "-F", str(path), "-O", "exit", node.name]
            subprocess.run(end, capture_output=True, timeout=10, check=False)


def node(plan: Inventory, name: str) -> Node:
    return next(n for n in plan.nodes if n.name == name)


def busybox(env: tuple[tuple[str, str], ...] = ()) -> ContainerSpec:
    return ContainerSpec(LAB_IMAGE, False, False, (), env, ("--network", "none"))


def test_a_nodes_engine_is_driven_over_its_ssh_master(lab, plan, config):
    lab.make_image("node2")
    work = Path(tempfile.mkdtemp(prefix="ig-w-"))
    with node_engine(node(plan, "node2"), config, work) as client:
        assert client.info()["Name"] == "node2"  # the node's own engine, not the machine's
        (private,) = work.iterdir()
        assert private.stat().st_mode & 0o777 == 0o700
        said = 'echo "token=$HF_TOKEN"; echo "injected=${INJECTED:-no}"; echo oops >&2; exit 3'
        command = ["sh", "-c", said]
        # a line break in a value is the value's: no env file whose lines it could break
        spec = busybox((("HF_TOKEN", f"{SECRET}\nINJECTED=1"),))
        exited = run_to_exit(client, spec, command, Deadline(60, "test"), "ig-api-lab", LABEL)
        seen = (3, f"token={SECRET}\nINJECTED=1\ninjected=no\n", "oops\n")
        assert (exited.status, exited.stdout, exited.stderr) == seen
        assert client.containers.list(all=True, filters={"label": "infergate.selftest"}) == []
        # the env went in the request body: no process on this machine shows it
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
        assert SECRET not in ps.stdout
    assert list(work.iterdir()) == []  # the forward's socket and its directory are gone
    work.rmdir()


def test_a_container_past_its_deadline_is_removed_and_says_so(lab, plan, config):
    lab.make_image("node1")
    with node_engine(node(plan, "node1"), config, Path(tempfile.gettempdir())) as client:
        start = time.monotonic()
        deadline = Deadline(2, "thresholds.rendezvous_timeout_s")
        exited = run_to_exit(client, busybox(), ["sleep", "60"], deadline, "ig-api-late", LABEL)
        assert time.monotonic() - start < 15
        assert exited.status is None
        assert "ig-api-late: not within 2 s (thresholds.rendezvous_timeout_s)" in exited.stderr
        assert "last seen: container running" in exited.stderr
        assert client.containers.list(all=True, filters={"label": "infergate.selftest"}) == []


def test_a_stopped_engine_is_named_with_the_node_and_the_remedy(clean_lab, plan, config):
    clean_lab.apply_fault("docker-stop", "node2")
    engine = node_engine(node(plan, "node2"), config, Path(tempfile.gettempdir()))
    with pytest.raises(EngineUnreachable) as refused, engine:
        pass
    said = str(refused.value)
    assert said.startswith("node2 (10.251.0.12): its Docker engine at unix:///run/infergate-lab/")
    assert "sudo systemctl start docker" in said


def test_probe_container_gets_the_plans_docker_args_and_runs_the_image_by_id(engine_lab, config):
    # the lab plan's docker_args mount the compile cache; a ulimit below the nodes' own
    # 8 MiB is added: the probe container, the launch's own, must show both
    memlock = 4 * 2**20
    data = yaml.safe_load(layout.INVENTORY_FILE.read_text())
    data["engine"]["docker_args"] += ["--ulimit", f"memlock={memlock}:{memlock}"]
    inventory = parse_inventory(data)
    with contextlib.ExitStack() as stack:
        clients = {
            n.name: stack.enter_context(node_engine(n, config, config.parent))
            for n in inventory.nodes
        }
        image_id = clients["node1"].images.get(inventory.image.ref).id
        inventory = replace(inventory, image=replace(inventory.image, id=image_id))

        def probe(rank: int, at: Node) -> InImage:
            def shell(command: str) -> str:
                return engine_lab.ssh(at.name, [command], timeout=60).stdout

            return probe_on_node(clients[at.name], shell, inventory, at, rank, "docker-args", True)

        with ThreadPoolExecutor(len(inventory.nodes)) as pool:
            seen = list(pool.map(probe, range(len(inventory.nodes)), inventory.nodes))
    for at, facts in zip(inventory.nodes, seen, strict=True):
        assert facts.rc == 0, (at.name, facts.said)
        container = body(facts.sections.get("container"))
        assert "/root/.cache/vllm" in container.get("mounts", []), (at.name, facts.sections)
        assert container["limits"]["memlock"] == [memlock, memlock], at.name
        assert check_all_reduce(body(facts.sections.get("rendezvous")), 2, 30) == [], at.name


NGC_ENTRYPOINT = '#!/bin/sh\necho "== NGC banner =="\nexec "$@"\n'


@pytest.fixture
def entrypoint_images(lab) -> Iterator[dict[str, str]]:
    """Two images on node1's engine, made from the busybox image: one whose entrypoint is an
    NGC-style /opt/nvidia/nvidia_entrypoint.sh (a banner, then the command), one whose
    entrypoint is a program of its own (as vLLM's image's `vllm serve`); removed after."""
    lab.make_image("node1")
    client = lab.engine("node1")
    script = (
        f"mkdir -p /opt/nvidia && printf %s '{NGC_ENTRYPOINT}' > /opt/nvidia/nvidia_entrypoint.sh"
    )
    made = {}
    for name, entrypoint in (("ngc", "/opt/nvidia/nvidia_entrypoint.sh"), ("own", "echo own")):
        container = client.containers.create(
            LAB_IMAGE, ["sh", "-c", script + " && chmod +x /opt/nvidia/*"]
        )
        container.start()
        container.wait(timeout=30)
        words = ", ".join(f'"{w}"' for w in entrypoint.split())
        made[name] = container.commit(
            f"iglab/entrypoint-{name}", "1", changes=[f"ENTRYPOINT [{words}]"]
        ).id
        container.remove()
    yield made
    for image in made.values():
        client.images.remove(image, force=True)
    client.close()


def test_ngcs_entrypoint_is_kept_and_any_other_cleared_on_a_real_engine(
    plan, config, entrypoint_images
):
    with node_engine(node(plan, "node1"), config, Path(tempfile.gettempdir())) as client:
        seen = {}
        for name, image in entrypoint_images.items():
            spec = replace(busybox(), image=image)
            exited = run_to_exit(
                client, spec, ["echo", "cmd"], Deadline(30, "test"), f"ig-ep-{name}", LABEL
            )
            seen[name] = exited.stdout
    assert seen == {"ngc": "== NGC banner ==\ncmd\n", "own": "cmd\n"}
