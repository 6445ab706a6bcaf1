"""engine.docker_args, written as docker CLI options, become typed Engine API arguments; the
container's create request is read as docker-py sends it, to a real HTTP server standing in
for the engine (it records the requests and answers as dockerd does)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
from docker.errors import ImageNotFound

from infergate.engines.container import ContainerSpec, clears_entrypoint
from infergate.plan.docker_args import DockerArgsError, parse_docker_args
from infergate.remote.docker_api import local_engine
from selftest.local_http import JsonHandler, serving

API = "1.41"  # the lab's dockerd (20.10) speaks it


class Engine(ThreadingHTTPServer):
    """Records each request (method, path, JSON body); create answers 404 for MISSING."""

    requests: list[tuple[str, str, Any]]
    missing = "absent:1"


class Handler(JsonHandler):
    server: Engine

    def _record(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.requests.append((self.command, self.path.split("?")[0], body))
        return body

    def do_GET(self) -> None:
        self._record()
        if self.path.endswith("/version"):
            self.reply(200, {"ApiVersion": API, "Version": "20.10.24"})
        else:
            self.reply(200, {"Id": "c1"})

    def do_POST(self) -> None:
        body = self._record()
        if body and body.get("Image") == self.server.missing:  # dockerd's own words
            self.reply(404, {"message": f"No such image: {self.server.missing}"})
        else:
            self.reply(201, {"Id": "c1", "Warnings": []})


@pytest.fixture
def engine() -> Iterator[Engine]:
    httpd = Engine(("127.0.0.1", 0), Handler)
    httpd.requests = []
    with serving(httpd):
        yield httpd


def create_body(engine: Engine, spec: ContainerSpec, command: list[str]) -> dict[str, Any]:
    client = local_engine(f"tcp://127.0.0.1:{engine.server_port}")
    client.containers.create(spec.image, command, **spec.create_kwargs())
    (body,) = [b for method, path, b in engine.requests if path.endswith("/containers/create")]
    return dict(body)


def spec(docker_args: tuple[str, ...] = (), gpus: bool = True, rdma: bool = True) -> ContainerSpec:
    env = (("HF_TOKEN", "hf_secret one\nline two"), ("VLLM_HOST_IP", "10.0.0.1"))
    return ContainerSpec("sha256:" + "ab" * 32, gpus, rdma, ("/models/m",), env, docker_args)


def test_the_engine_container_is_created_with_the_clis_options_as_typed_fields(engine):
    body = create_body(engine, spec(), ["vllm", "serve", "/models/m"])
    host = body["HostConfig"]
    assert body["Image"] == "sha256:" + "ab" * 32
    assert body["Cmd"] == ["vllm", "serve", "/models/m"]
    assert host["NetworkMode"] == "host"
    assert host["IpcMode"] == "host"
    assert host["Binds"] == ["/models/m:/models/m:ro"]
    assert host["DeviceRequests"] == [
        {"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    ]
    assert host["Devices"] == [
        {
            "PathOnHost": "/dev/infiniband",
            "PathInContainer": "/dev/infiniband",
            "CgroupPermissions": "rwm",
        }
    ]
    assert host["Ulimits"] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
    # in the body, whole: a line break in a value is the value's, not a variable of its own
    assert sorted(body["Env"]) == ["HF_TOKEN=hf_secret one\nline two", "VLLM_HOST_IP=10.0.0.1"]
    assert "Entrypoint" not in body  # the image's, unless the caller clears it


def test_a_cpu_node_without_hcas_asks_for_no_devices(engine):
    host = create_body(engine, spec(gpus=False, rdma=False), ["true"])["HostConfig"]
    assert "DeviceRequests" not in host
    assert "Devices" not in host
    assert "Ulimits" not in host


def test_create_never_pulls_a_missing_image(engine):
    client = local_engine(f"tcp://127.0.0.1:{engine.server_port}")
    with pytest.raises(ImageNotFound, match="No such image: absent:1"):
        client.containers.create("absent:1", ["true"], **spec().create_kwargs())
    assert [path for _, path, _ in engine.requests if "/images/" in path] == []


def test_the_plans_docker_args_come_last_and_have_the_final_word(engine):
    args = (
        "--shm-size",
        "8g",
        "-e",
        "HF_TOKEN=from-args",
        "--env=NCCL_DEBUG=INFO",
        "-v",
        "/srv/cache:/root/.cache",
        "--ulimit",
        "memlock=1024:2048",
        "--ulimit=nofile=65536",
        "--device",
        "/dev/fuse",
        "--cap-add",
        "IPC_LOCK",
        "--security-opt",
        "seccomp=unconfined",
        "--privileged",
        "--gpus",
        "device=0,1",
        "--runtime",
        "nvidia",
        "-u",
        "1000:1000",
        "--ipc=private",
        "--net",
        "bridge",
        "--pids-limit",
        "4096",
        "-m",
        "64g",
        "--group-add",
        "video",
        "--cpuset-cpus",
        "0-7",
    )
    body = create_body(engine, spec(args), ["true"])
    host = body["HostConfig"]
    assert host["ShmSize"] == 8 * 2**30
    assert "HF_TOKEN=from-args" in body["Env"]
    assert "NCCL_DEBUG=INFO" in body["Env"]
    assert host["Binds"] == ["/models/m:/models/m:ro", "/srv/cache:/root/.cache"]
    assert host["Ulimits"] == [
        {"Name": "memlock", "Soft": 1024, "Hard": 2048},
        {"Name": "nofile", "Soft": 65536, "Hard": 65536},
    ]
    assert [d["PathOnHost"] for d in host["Devices"]] == ["/dev/infiniband", "/dev/fuse"]
    assert host["CapAdd"] == ["IPC_LOCK"]
    assert host["SecurityOpt"] == ["seccomp=unconfined"]
    assert host["Privileged"] is True
    assert [(r["Count"], r["DeviceIDs"]) for r in host["DeviceRequests"]] == [(0, ["0", "1"])]
    assert host["Runtime"] == "nvidia"
    assert body["User"] == "1000:1000"
    assert (host["IpcMode"], host["NetworkMode"]) == ("private", "bridge")
    assert host["PidsLimit"] == 4096
    assert host["Memory"] == 64 * 2**30
    assert host["GroupAdd"] == ["video"]
    assert host["CpusetCpus"] == "0-7"


@pytest.mark.parametrize(
    ("args", "entrypoint"),
    [(("--entrypoint", ""), []), (("--entrypoint=/bin/sh",), ["/bin/sh"])],
    ids=["cleared", "one-program"],
)
def test_an_entrypoint_in_docker_args_is_one_program_or_none(engine, args, entrypoint):
    assert create_body(engine, spec(args), ["true"])["Entrypoint"] == entrypoint


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tmpfs", "/mnt"], "engine.docker_args: --tmpfs cannot be given through the Docker API"),
        (["--rm"], "engine.docker_args: --rm cannot be given"),
        (["--shm-size"], "engine.docker_args: --shm-size needs a value after it"),
        (["-e", "HF_TOKEN"], "engine.docker_args: -e HF_TOKEN: give the value in the plan"),
        (["--ulimit", "memlock"], "engine.docker_args: --ulimit memlock: NAME=SOFT[:HARD]"),
        (["--gpus", "half"], "engine.docker_args: --gpus half: all, a count, or device="),
        (["--pids-limit", "many"], "engine.docker_args: --pids-limit many: a whole number"),
    ],
)
def test_an_option_the_api_is_not_given_is_refused_by_name(args, said):
    with pytest.raises(DockerArgsError) as refused:
        parse_docker_args(args)
    assert str(refused.value).startswith(said)


def test_the_refusal_lists_what_can_be_given():
    with pytest.raises(DockerArgsError, match="these can: --cap-add, --cpuset-cpus, --device"):
        parse_docker_args(["--tmpfs", "/mnt"])


def test_the_lab_plans_docker_args_translate():
    assert parse_docker_args(["-v", "/root/.cache/vllm:/root/.cache/vllm"]) == {
        "volumes": ["/root/.cache/vllm:/root/.cache/vllm"]
    }


@pytest.mark.parametrize(
    ("entrypoint", "cleared"),
    [
        (["/opt/nvidia/nvidia_entrypoint.sh"], False),  # NGC's: CUDA compat and its banner
        (None, False),
        ([], False),
        (["vllm", "serve"], True),  # vLLM's image would serve whatever follows
        (["python3", "-m", "sglang.launch_server"], True),
    ],
)
def test_ngcs_entrypoint_is_kept_and_any_other_cleared(entrypoint, cleared):
    assert clears_entrypoint(entrypoint) is cleared
