"""`infergate plan init`: the example plan the wheel ships, written where asked and never over
a file unasked; as written, `plan check` lists each of its TODOs by key, and once they are
filled (here as an operator of two DGX Sparks would) it passes, with vLLM or with SGLang."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.cli import main
from infergate.plan.example import EXAMPLE
from infergate.plan.model import InventoryError, parse_inventory
from infergate.plan.values import TODO
from selftest.unit.test_inventory import lab_with

# what an operator of two Sparks writes over each TODO
FILLED: dict[str, object] = {
    "nodes[0].address": "10.1.230.180",
    "nodes[0].ssh.user": "aurora",
    "nodes[0].fabric.address": "192.168.200.12/24",
    "nodes[0].fabric.hcas": ["rocep1s0f1", "roceP2p1s0f1"],
    "nodes[1].address": "10.1.230.181",
    "nodes[1].ssh.user": "aurora",
    "nodes[1].fabric.address": "192.168.200.13/24",
    "nodes[1].fabric.hcas": ["rocep1s0f1", "roceP2p1s0f1"],
    "fabric.interface": "enp1s0f1np1",
    "fabric.subnet": "192.168.200.0/24",
    "image.ref": "nvcr.io/nvidia/vllm:26.05-py3",
    "model.path": "/srv/models/Qwen3.5-122B-A10B-FP8",
    "model.served_name": "qwen3.5-122b-a10b-fp8",
    "model.size_gib": 118.5,
    "engine.dist_init_addr": "192.168.200.12",
    "engine.env.NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
}
# a plan check that reads no ssh_config of the machine running the tests
CHECK = ["plan", "check", "--ssh-user-config=none"]


def todos(data: Any, path: str = "") -> dict[str, str]:
    """Each TODO value of the loaded plan DATA, by key path."""
    if isinstance(data, dict):
        return {k: v for key, item in data.items() for k, v in todos(item, join(path, key)).items()}
    if isinstance(data, list):
        return {k: v for i, item in enumerate(data) for k, v in todos(item, f"{path}[{i}]").items()}
    return {path: data} if isinstance(data, str) and data.startswith(TODO) else {}


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def filled(data: dict[str, Any]) -> dict[str, Any]:
    """DATA with every TODO replaced from FILLED (each TODO must have its value there)."""
    for path in todos(data):
        *parents, last = re.findall(r"[^.\[\]]+", path)
        target: Any = data
        for step in parents:
            target = target[int(step)] if step.isdigit() else target[step]
        target[last] = FILLED[path]
    return data


def sglang_engine() -> dict[str, Any]:
    """The commented SGLang engine section at the example's end, uncommented."""
    text = EXAMPLE.read_text()
    block = text[text.index("# engine:\n") :].splitlines()
    engine: dict[str, Any] = yaml.safe_load("\n".join(line.removeprefix("# ") for line in block))
    return engine["engine"]


def written(folder: Path, data: dict[str, Any]) -> str:
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_plan_init_writes_the_example_and_says_what_is_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "my plan.yaml"
    assert main(["plan", "init", "-o", str(out)]) == 0
    assert out.read_text() == EXAMPLE.read_text()
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {out}: an example plan of two GPU nodes")
    assert f"infergate plan check '--plan={out}'" in said  # quoted, to paste
    assert f"infergate deploy '--plan={out}'" in said


def test_plan_init_writes_plan_yaml_here_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "init"]) == 0
    assert (tmp_path / "plan.yaml").read_text() == EXAMPLE.read_text()


def test_plan_init_writes_over_a_file_only_when_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.yaml"
    out.write_text("name: mine\n")
    assert main(["plan", "init", "-o", str(out)]) == 4
    assert capsys.readouterr().err == (
        f"{out}: exists; --force writes over it, or -o names another path\n"
    )
    assert out.read_text() == "name: mine\n"
    assert main(["plan", "init", "-o", str(out), "--force"]) == 0
    assert out.read_text() == EXAMPLE.read_text()


def test_plan_init_into_a_missing_folder_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "no-such-folder" / "plan.yaml"
    assert main(["plan", "init", "-o", str(out)]) == 4
    assert capsys.readouterr().err == f"{out}: cannot write: No such file or directory\n"


def test_the_example_as_written_fails_plan_check_naming_every_todo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.yaml"
    main(["plan", "init", "-o", str(out)])
    capsys.readouterr()
    left = todos(yaml.safe_load(out.read_text()))
    assert sorted(left) == sorted(FILLED)
    assert main([*CHECK, f"--plan={out}"]) == 4
    said = capsys.readouterr().err.splitlines()
    assert said[0] == f"--plan {out}: {len(left)} problems:"
    for path, value in left.items():
        what = value.removeprefix(f"{TODO}:").strip()
        assert any(line.endswith(f": {path}: TODO left: {what}") for line in said[1:]), path
    assert len(said) == 1 + len(left)


def test_the_example_with_its_todos_filled_passes_plan_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = written(tmp_path, filled(yaml.safe_load(EXAMPLE.read_text())))
    assert main([*CHECK, f"--plan={plan}"]) == 0, capsys.readouterr()
    said = capsys.readouterr().out
    assert said.startswith(f"{plan}: two-sparks (vllm, 2 nodes: spark1 (10.1.230.180), ")


def test_its_sglang_alternative_with_its_todos_filled_passes_plan_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["engine"] = sglang_engine()
    plan = written(tmp_path, filled(data))
    assert main([*CHECK, f"--plan={plan}"]) == 0, capsys.readouterr()
    assert "two-sparks (sglang, 2 nodes" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (("nodes[0].gpus", "TODO"), "nodes[0].gpus: TODO left: fill it in"),
        (("engine.flags", ["--x", "TODO: a flag"]), "engine.flags[1]: TODO left: a flag"),
        (("engine.env.HF_TOKEN", "TODO: your token"), "engine.env.HF_TOKEN: TODO left: your token"),
        (("model.path", "TODO: \x1b[2J"), "model.path: TODO left: \\x1b[2J"),
    ],
    ids=["bare-integer-key", "list-item", "env-value", "escape"],
)
def test_a_todo_anywhere_is_refused_naming_its_key(change: tuple[str, object], said: str) -> None:
    """Whatever the key takes: a TODO is refused as one, not as a value of the wrong type."""
    with pytest.raises(InventoryError) as caught:
        parse_inventory(lab_with(change))
    assert [str(e) for e in caught.value.errors] == [said]
