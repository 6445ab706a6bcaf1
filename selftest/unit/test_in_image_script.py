"""The in-image probe (checks/scripts/in_image.py) reads each engine's facts the way the
engine's adapter tells it (Engine.probe, its first argument), never by the kind: run for real
on stand-in engine packages (a registry, a server parser, a version), one per adapter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infergate.checks.inimage import SCRIPT, body
from infergate.checks.probe import parse_sections
from infergate.engines.registry import engine_for
from infergate.plan.model import EngineKind

# vLLM's ModelRegistry comes from the package's module __getattr__, as in vllm/__init__.py
STAND_INS = {
    "vllm/__init__.py": "__version__ = 'vllm-imported'\n"
    "def __getattr__(name):\n"
    "    if name != 'ModelRegistry':\n"
    "        raise AttributeError(name)\n"
    "    class ModelRegistry:\n"
    "        get_supported_archs = staticmethod(lambda: ['LlamaForCausalLM'])\n"
    "    return ModelRegistry\n",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/openai/__init__.py": "",
    "vllm/entrypoints/openai/cli_args.py": "def make_arg_parser(parser):\n"
    "    parser.add_argument('model')\n"
    "    parser.add_argument('--max-model-len')\n"
    "    return parser\n",
    "vllm/utils/__init__.py": "from argparse import ArgumentParser as FlexibleArgumentParser\n",
    "sglang/__init__.py": "__version__ = 'sglang-imported'\n",
    "sglang/srt/__init__.py": "",
    "sglang/srt/models/__init__.py": "",
    "sglang/srt/models/registry.py": "class ModelRegistry:\n"
    "    get_supported_archs = staticmethod(lambda: ['Qwen3ForCausalLM'])\n",
    "sglang/srt/server_args.py": "class ServerArgs:\n"
    "    @staticmethod\n"
    "    def add_cli_args(parser):\n"
    "        parser.add_argument('--model-path', required=True)\n"
    "        parser.add_argument('--context-length')\n",
    "ray/__init__.py": "__version__ = 'ray-imported'\n",
}
PLANNED = ["--max-model-len", "8", "--context-length", "8"]


def probe(tmp_path: Path, argument: str) -> dict[str, dict]:
    for name, text in STAND_INS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(tmp_path),
        "HOME": str(tmp_path),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }
    argv = [argument, str(tmp_path / "model"), "0", "1", "5", "fresh", *PLANNED]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return {name: body(s) for name, s in parse_sections(done.stdout).items()}


@pytest.mark.parametrize(
    ("kind", "imported", "archs", "unknown"),
    [
        ("vllm", {"vllm"}, ["LlamaForCausalLM"], ["--context-length", "8"]),
        ("vllm-ray", {"vllm", "ray"}, ["LlamaForCausalLM"], ["--context-length", "8"]),
        ("sglang", {"sglang"}, ["Qwen3ForCausalLM"], ["--max-model-len", "8"]),
    ],
)
def test_the_probe_reads_the_engine_its_adapter_names(
    tmp_path: Path, kind: EngineKind, imported: set[str], archs: list[str], unknown: list[str]
) -> None:
    found = probe(tmp_path, engine_for(kind).probe.argument())
    versions = found["versions"]
    assert {m for m in ("vllm", "sglang", "ray") if versions[m] == f"{m}-imported"} == imported
    assert found["registry"] == {"archs": archs, "warnings": 0, "first_warnings": []}
    assert found["flags"] == {"unknown": unknown}  # the model's path taken as that parser wants


def test_the_adapters_argument_is_one_json_object() -> None:
    argument = engine_for("sglang").probe.argument()
    assert json.loads(argument) == {
        "imports": ["sglang"],
        "registry": "sglang.srt.models.registry",
        "parser": "sglang_parser",
        "model_flag": "--model-path",
    }
