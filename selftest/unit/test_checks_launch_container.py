"""The launch container's limits and caches, and the chat template (infergate.checks.
launch_container): the in-image probe's own `container` fact run for real on this machine,
under the limits and the user a plan's docker_args would give the engine (prlimit, setpriv:
what `--ulimit` and `-u` set in a container), and the `chat-template` sections recorded in
the lab image (selftest/data/README.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from infergate.checks.inimage import SCRIPT, body
from infergate.checks.launch_container import (
    check_caches_writable,
    check_chat_template,
    check_locked_memory,
    check_open_files,
    most_in_flight,
)
from infergate.checks.probe import parse_sections
from infergate.engines.container import ContainerSpec
from infergate.plan.model import MAX_IN_FLIGHT, Inference, parse_inventory
from selftest.unit.test_checks_inimage import lookup
from selftest.unit.test_preflight_report import PLAN

LAB = Path(__file__).parents[1] / "data" / "lab"
DEVICE = Path(__file__).parents[1] / "data" / "h200-device"
# the probe's functions without its main: what `container()` returns, as JSON
READ = "import json, sys; ns = {'__name__': 'probe'}; exec(sys.stdin.read(), ns); "
READ += "print(json.dumps(ns['container']()))"


def container_fact(*wrapper: str, env: dict[str, str] | None = None) -> dict:
    done = subprocess.run(
        [*wrapper, "/usr/bin/python3", "-c", READ],
        input=SCRIPT,
        text=True,
        capture_output=True,
        check=True,
        env=env or dict(os.environ),
        timeout=30,
    )
    return json.loads(done.stdout)


FLOOR = 65536  # thresholds.min_open_files's default
LAB_FLOOR = 16384  # inventories/lab.yaml's: this machine kind's hard limit is 20000
NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
NOBODY_ENV = {"HOME": "/nonexistent", "PATH": "/usr/bin:/bin"}


def test_a_low_open_files_limit_is_named_with_the_flag_that_raises_it():
    fact = container_fact("prlimit", "--nofile=1024:1024")
    assert fact["limits"]["nofile"] == [1024, 1024]
    (problem,) = check_open_files(fact, in_flight=16, floor=FLOOR)
    assert problem.found.startswith("open files 1024 soft, 1024 hard in the launch's container")
    assert problem.planned.startswith("at least 65536")
    assert "--ulimit nofile=1048576:1048576" in problem.remedy


def test_a_soft_limit_the_engine_raises_itself_counts_up_to_the_hard_one():
    # vLLM and SGLang raise the soft limit to 65535 within the hard one (set_ulimit): this
    # machine's hard limit, 20000, is where that stops
    fact = container_fact("prlimit", "--nofile=1024:20000")
    assert check_open_files(fact, 16, floor=LAB_FLOOR) == []
    (problem,) = check_open_files(fact, 16, floor=FLOOR)
    assert "(the engine raises its soft limit to at most 20000)" in problem.found
    assert problem.planned == (
        "at least 65536 (thresholds.min_open_files 65536, or 4 x 16 requests in flight: the "
        "highest inference.concurrency, or 1024 where inference.request_rates plans an "
        "open-loop level)"
    )


def test_an_open_loop_plan_needs_files_for_the_clients_whole_pool():
    """A plan with only request_rates holds up to MAX_IN_FLIGHT requests in flight (arrivals pile
    up while the engine falls behind): 4 x 1024 files, more than a limit of 1000 gives, where
    the closed loop at the same floor passes."""
    rates_only = parse_inventory({**PLAN, "inference": {"concurrency": [], "request_rates": [0.5]}})
    assert rates_only.inference.concurrency == ()
    assert most_in_flight(rates_only.inference) == MAX_IN_FLIGHT == 1024
    assert most_in_flight(Inference(concurrency=(1, 4))) == 4
    assert most_in_flight(Inference(concurrency=(2048,), request_rates=(2.0,))) == 2048
    fact = container_fact("prlimit", "--nofile=1000:1000")
    assert check_open_files(fact, most_in_flight(Inference(concurrency=(4,))), floor=512) == []
    (problem,) = check_open_files(fact, most_in_flight(rates_only.inference), floor=512)
    assert problem.planned.startswith("at least 4096 (thresholds.min_open_files 512, or 4 x 1024")


def test_the_labs_launch_container_passes_but_its_bounded_memlock_would_not_serve_hcas():
    healthy = recorded("inimage-container-healthy.txt", "container")
    assert check_open_files(healthy, in_flight=16, floor=LAB_FLOOR) == []
    assert check_caches_writable(healthy) == []
    (problem,) = check_open_files(healthy, in_flight=300_000, floor=LAB_FLOOR)
    assert "planned at least 1200000" in f"planned {problem.planned}"
    (problem,) = check_locked_memory(healthy)  # the lab plans no HCAs: its dockerd's limit
    assert problem.found == "locked memory 8192 KiB soft, 8192 KiB hard in the launch's container"
    assert "--ulimit memlock=-1:-1" in problem.remedy


def test_an_h200_hosts_unlimited_locked_memory_passes():
    h200 = body(parse_sections((DEVICE / "inimage-container-default.txt").read_text())["container"])
    assert h200["limits"]["memlock"] == [-1, -1]
    assert check_locked_memory(h200) == []


def test_bounded_locked_memory_is_named_in_kib():
    fact = container_fact("prlimit", "--memlock=65536:65536")
    (problem,) = check_locked_memory(fact)
    assert problem.found == "locked memory 64 KiB soft, 64 KiB hard in the launch's container"


def test_caches_a_user_cannot_write_are_named_with_the_user():
    fact = container_fact(*NOBODY, env=NOBODY_ENV)
    assert fact["user"] == {"uid": 65534, "gid": 65534, "home": "/nonexistent"}
    problems = check_caches_writable(fact)
    assert [p.found.split()[0] for p in problems] == [
        "HF_HOME",
        "VLLM_CACHE_ROOT",
        "TRITON_CACHE_DIR",
        "~/.cache",
    ]
    assert problems[1].found == (
        "VLLM_CACHE_ROOT /nonexistent/.cache/vllm not writable by uid 65534 (HOME "
        "/nonexistent) (its nearest existing parent /)"
    )
    assert problems[3].remedy.startswith("set XDG_CACHE_HOME in engine.env")


def test_caches_the_user_can_write_pass():
    home = tempfile.mkdtemp(prefix="infergate-nobody-", dir="/tmp")  # a path nobody can reach
    try:
        os.chown(home, 65534, 65534)
        env = {**NOBODY_ENV, "HOME": home}
        assert check_caches_writable(container_fact(*NOBODY, env=env)) == []
        ro = {**env, "VLLM_CACHE_ROOT": "/proc/sys/vm"}  # exists, not writable by that user
        (problem,) = check_caches_writable(container_fact(*NOBODY, env=ro))
    finally:
        shutil.rmtree(home)
    assert problem.found.startswith("VLLM_CACHE_ROOT /proc/sys/vm not writable by uid 65534")


def recorded(name: str, section: str) -> dict:
    return body(parse_sections((LAB / name).read_text()).get(section))


def recorded_chat(name: str) -> dict:
    return recorded(name, "chat-template")


def test_the_labs_template_renders_and_a_copy_without_one_is_named():
    assert check_chat_template(recorded_chat("inimage-container-healthy.txt")) == []
    (problem,) = check_chat_template(recorded_chat("inimage-chat-template-removed.txt"))
    assert problem.found.startswith("no chat template: neither tokenizer_config.json's")
    assert "--chat-template FILE" in problem.remedy


@pytest.mark.parametrize("name", ["inimage-chat-template-bad-file.txt"])
def test_a_planned_template_that_does_not_load_is_named(name):
    (problem,) = check_chat_template(recorded_chat(name))
    assert problem.found.startswith("the chat template of --chat-template /nowhere.jinja")


def test_the_cached_template_is_read_again_when_the_models_template_files_change(tmp_path):
    spec = ContainerSpec("img:1", False, False, ("/m",), (), ())
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (model / "chat_template.jinja").write_text("{{ messages }}")
    first, _, _ = lookup(spec, "sha256:" + "1f" * 32, tmp_path)
    assert lookup(spec, "sha256:" + "1f" * 32, tmp_path)[0] == first
    (model / "chat_template.jinja").unlink()
    without, _, _ = lookup(spec, "sha256:" + "1f" * 32, tmp_path)
    (model / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    assert len({first, without, lookup(spec, "sha256:" + "1f" * 32, tmp_path)[0]}) == 3
