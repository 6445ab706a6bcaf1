"""Record the in-image probe's `container` and `chat-template` facts in the lab's image, as
test data for infergate.checks.launch_container (selftest/unit/test_checks_launch_container.py).

    flock /tmp/infergate-lab.lock python scripts/record_launch_container.py   # the lab up

The real probe, fresh, one rank alone (Gloo over lo) on node1, in a container built as the
launch's (the lab plan's mounts and docker_args), once per case:
- `inimage-container-healthy.txt`: the lab plan as it is;
- `inimage-chat-template-removed.txt`: under the lab fault chat-template-missing on node1;
- `inimage-chat-template-bad-file.txt`: `--chat-template /nowhere.jinja` planned.
Prints each run's wall time, and the chat template's own cost in that image. (Locked memory
unlimited cannot be recorded here: the lab's dockerd may not raise a limit past its own,
8192 KiB on this machine kind, and runc refuses `--ulimit memlock=-1:-1`.)
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from infergate.checks.inimage import probe_command
from infergate.engines.container import ContainerSpec
from infergate.engines.labels import PROBE_LABEL
from infergate.engines.registry import engine_for
from infergate.remote.docker_api import run_to_exit
from infergate.waiting import Deadline
from infergate_lab import Lab

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "selftest" / "data" / "lab"
IMAGE = "infergate-lab/vllm-cpu:0.32.0"
MODEL = "/srv/models/SmolLM2-135M-Instruct"
PLAN_ARGS = ("-v", "/root/.cache/vllm:/root/.cache/vllm")  # inventories/lab.yaml's docker_args
TIMED = (
    "import time; t = time.monotonic(); from transformers import AutoTokenizer; "
    "i = time.monotonic(); tok = AutoTokenizer.from_pretrained('" + MODEL + "'); "
    "tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False); "
    "print(f'transformers import {i - t:.2f} s, tokenizer + render {time.monotonic() - i:.2f} s')"
)


def run(lab: Lab, name: str, command: list[str], docker_args: tuple[str, ...]) -> str:
    env = (("GLOO_SOCKET_IFNAME", "lo"), ("VLLM_CPU_KVCACHE_SPACE", "1"))
    spec = ContainerSpec(IMAGE, False, False, (MODEL,), env, docker_args)
    start = time.monotonic()
    with contextlib.closing(lab.engine("node1")) as client:
        done = run_to_exit(
            client,
            spec,
            command,
            Deadline(300, "record_launch_container"),
            f"infergate-record-{name}",
            {PROBE_LABEL: "record"},
        )
    print(f"{name}: exit {done.status}, {time.monotonic() - start:.1f} s")
    return done.stdout


def record(lab: Lab, name: str, flags: tuple[str, ...] = (), docker_args=PLAN_ARGS) -> None:
    engine = engine_for("vllm").probe.argument()
    args = [engine, MODEL, "0", "1", "60", "--max-model-len", "1024", *flags]
    master = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}
    stdout = run(lab, name, probe_command(args, master, "fresh"), docker_args)
    (OUT / f"{name}.txt").write_text(stdout)


def main() -> None:
    lab = Lab(say=print)
    print(run(lab, "timed", ["python3", "-c", TIMED], PLAN_ARGS).strip())
    record(lab, "inimage-container-healthy")
    record(lab, "inimage-chat-template-bad-file", ("--chat-template", "/nowhere.jinja"))
    lab.apply_fault("chat-template-missing", "node1", "SmolLM2-135M-Instruct")
    try:
        record(lab, "inimage-chat-template-removed")
    finally:
        lab.clear_faults()


if __name__ == "__main__":
    main()
