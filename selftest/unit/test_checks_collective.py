"""The collective sweep: the in-image probe's lines recorded in the lab and on a lent 1-GPU
host (an H100), nccl-tests' table as published for a DGX Spark pair, and composed forms for
what no host here shows (a slow largest size, a wrong sum); sources: selftest/data/README.md."""

import json
import math
from pathlib import Path

import pytest
import yaml

from infergate.checks.collective import (
    Size,
    Sweep,
    check_sweep_bandwidth,
    check_sweep_correct,
    latency,
    parse_nccl_tests,
    parse_sweep_lines,
    spark_pair_floor,
)
from infergate.checks.inimage import body, collective_sweep
from infergate.checks.probe import parse_sections
from infergate.plan.model import parse_inventory

DATA = Path(__file__).parents[1] / "data"
ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30


def nccl_tests(name: str, in_place: bool = False) -> Sweep:
    sweep = parse_nccl_tests((DATA / "nccl-tests" / name).read_text(), in_place)
    assert sweep is not None
    return sweep


def rendezvous(path: Path) -> dict:
    return body(parse_sections(path.read_text()).get("rendezvous"))


def test_nccl_tests_all_gather_at_the_vendors_size_reads_both_column_groups():
    out_of_place = nccl_tests("spark-pair-all-gather-16G.txt")
    assert (out_of_place.collective, out_of_place.world) == ("all_gather_perf", 2)
    assert out_of_place.sizes == (Size(16 * GIB, 453650.0, 37.87, 18.94, 0),)
    assert nccl_tests("spark-pair-all-gather-16G.txt", in_place=True).sizes[0].busbw_gbps == 20.95
    assert check_sweep_correct(out_of_place) == []


def test_spark_pair_before_the_mtu_fix_is_below_the_vendors_floor():
    """The published 16 GiB all-gather of a pair before MTU 9000: under NVIDIA's 21.875."""
    sweep = nccl_tests("spark-pair-all-gather-16G.txt")
    [problem] = check_sweep_bandwidth(sweep, 21.875, 16 * GIB)
    assert "all_gather_perf busbw 18.94 GB/s at 16 GiB" in problem.found
    assert "16 GiB (thresholds.nccl_busbw_min_gbytes_per_sec" in problem.planned
    in_place = nccl_tests("spark-pair-all-gather-16G.txt", in_place=True)
    assert check_sweep_bandwidth(in_place, 20.0, 16 * GIB) == []


def test_nccl_tests_all_reduce_small_sizes_give_the_latency():
    sweep = nccl_tests("spark-pair-all-reduce-head.txt")
    assert [s.nbytes for s in sweep.sizes] == [8192, 16384, 32768, 65536]
    assert latency(sweep) == "8 KiB 35.15 µs, 16 KiB 31.67 µs, 32 KiB 39.56 µs, 64 KiB 67.93 µs"


def test_nccl_tests_without_its_check_is_named_not_passed():
    """Composed: the all-gather row with `N/A` in #wrong, as `-c 0` prints it."""
    sweep = nccl_tests("composed-all-gather-16G-unchecked.txt")
    assert sweep.sizes[0].wrong is None
    [problem] = check_sweep_correct(sweep)
    assert "no check made at 16 GiB" in problem.found


def composed(name: str) -> Sweep:
    sweep = parse_sweep_lines((DATA / "collective" / name).read_text().splitlines())
    assert sweep is not None
    return sweep


def test_wrong_elements_are_a_red_naming_the_size():
    """Composed: the lab's Gloo sweep with 7 wrong elements at 2 MiB."""
    [problem] = check_sweep_correct(composed("composed-wrong-at-2MiB.txt"))
    assert problem.found == "gloo all-reduce across 2 ranks: 7 wrong at 2 MiB"
    assert "Xid" in problem.remedy


def test_a_sweep_that_stopped_before_the_planned_size_is_not_judged_at_a_smaller_one():
    """Composed: the lab's Gloo sweep, stopped by its budget before 128 MiB of a 1 GiB plan."""
    [problem] = check_sweep_bandwidth(composed("composed-stopped-before-128MiB.txt"), 0.5, GIB)
    assert "busbw 0.705 GB/s at 16 MiB" in problem.found
    assert "latency 8 B 430.05 µs, 64 B 828.88 µs" in problem.found
    assert problem.found.endswith("sweep stopped before bytes=134217728: 20.0 s budget")
    assert "at 1 GiB (thresholds.nccl_busbw_min_gbytes_per_sec, fabric.collective_max_mib)" in (
        problem.planned
    )


def test_no_sweep_is_a_red_not_a_pass():
    assert check_sweep_correct(None) != []
    assert "did not complete" in check_sweep_bandwidth(None, 1.0, GIB)[0].found
    none_ran = parse_sweep_lines(["sweep stopped before bytes=8: 0.4 s budget"])
    [problem] = check_sweep_correct(none_ran)
    assert problem.found.endswith("sweep stopped before bytes=8: 0.4 s budget")
    assert problem.remedy.startswith("raise thresholds.rendezvous_timeout_s")


def test_the_two_h200_128_mib_form_is_judged_as_one_unchecked_size():
    """Recorded before the sweep (2xH200, 265-267 GB/s at 128 MiB): at a 1 GiB plan it is a
    red for its size, whatever its busbw, and its sum was never checked."""
    sweep = collective_sweep(rendezvous(DATA / "h200-device" / "inimage-ok-rank0.txt"))
    assert sweep is not None
    assert [s.nbytes for s in sweep.sizes] == [128 * 2**20]
    assert check_sweep_bandwidth(sweep, 100.0, 128 * 2**20) == []
    [problem] = check_sweep_bandwidth(sweep, 100.0, GIB)
    assert "at 128 MiB" in problem.found
    assert "ended early" in problem.found
    assert "no check made at 128 MiB" in check_sweep_correct(sweep)[0].found


def test_spark_floor_is_the_vendors_carried_to_the_size_we_measure():
    assert spark_pair_floor(16 * GIB) == pytest.approx(21.875, abs=0.01)
    assert spark_pair_floor(GIB) == pytest.approx(21.86, abs=0.005)
    assert spark_pair_floor(128 * 2**20) < spark_pair_floor(GIB)


@pytest.mark.parametrize(
    "plan", ["two-sparks-vllm.yaml", "two-sparks-sglang.yaml", "two-sparks-vllm-ray.yaml"]
)
def test_spark_plans_floor_is_the_calibrated_one_rounded_down(plan):
    inventory = parse_inventory(yaml.safe_load((ROOT / "inventories" / plan).read_text()))
    largest = inventory.fabric.collective_max_mib * 2**20
    expected = math.floor(spark_pair_floor(largest) * 10) / 10
    assert inventory.thresholds.nccl_busbw_min_gbytes_per_sec == expected


@pytest.mark.parametrize("lab_node", ["node1", "node2"])
def test_lab_gloo_sweep_reads_every_size_right_and_keeps_its_lines(lab_node):
    recorded = json.loads((DATA / "lab" / "collective-sweep-gloo.json").read_text())[lab_node]
    sweep = parse_sweep_lines(recorded["lines"])
    assert sweep is not None
    assert (sweep.collective, sweep.world) == ("gloo all-reduce", 2)
    assert [s.nbytes for s in sweep.sizes] == [8 * 8**k for k in range(8)]
    assert sweep.sizes[-1].busbw_gbps == recorded["busbw_gbps"]
    assert latency(sweep) == recorded["latency"]
    assert check_sweep_correct(sweep) == []
    assert check_sweep_bandwidth(sweep, 0.5, 16 * 2**20) == []
    assert check_sweep_bandwidth(sweep, 0.5, GIB) != []  # a 1 GiB plan: not measured there


def device(case: str, rank: int = 0) -> dict:
    """A rank's sections, less the `wall_s=... exit=N` line the recorder appended."""
    text = (DATA / "h100-device" / "sweep" / f"sweep-{case}-rank{rank}.txt").read_text()
    kept = [line for line in text.splitlines() if not line.startswith("wall_s=")]
    return body(parse_sections("\n".join(kept)).get("rendezvous"))


def test_one_gpu_nccl_sweep_to_1_gib_is_the_latency_form():
    """Recorded on a lent H100 (world 1): every size summed right, busbw 0 by definition."""
    result = device("nccl-world1")
    sweep = collective_sweep(result)
    assert sweep is not None
    assert (sweep.collective, sweep.world) == ("nccl all-reduce", 1)
    assert [s.nbytes for s in sweep.sizes] == [8 * 8**k for k in range(9)] + [GIB]
    assert {s.busbw_gbps for s in sweep.sizes} == {0.0}
    assert check_sweep_correct(sweep) == []
    assert latency(sweep).startswith("8 B 17.01 µs, 64 B 16.2 µs")
    [problem] = check_sweep_bandwidth(sweep, 21.8, GIB)
    assert "busbw 0 GB/s at 1 GiB" in problem.found
    assert result["sweep_s"] < 1


@pytest.mark.parametrize(
    ("case", "largest"), [("nccl-world1-128MiB", 2**27), ("nccl-world1-8B", 8)]
)
def test_one_gpu_sweep_ends_at_the_planned_size(case, largest):
    sweep = collective_sweep(device(case))
    assert sweep is not None
    assert sweep.sizes[-1].nbytes == largest
    assert check_sweep_bandwidth(sweep, 0.0001, largest) != []  # world 1: busbw 0


@pytest.mark.parametrize("rank", [0, 1])
def test_two_ranks_on_one_gpu_are_refused_by_nccl(rank):
    """Recorded: NCCL 2.28.9 refuses two ranks on one GPU; the probe's section says so."""
    result = device("nccl-shared-gpu", rank)
    assert "Duplicate GPU detected" in result["error"]
    assert collective_sweep(result) is None


@pytest.mark.parametrize("rank", [0, 1])
def test_two_gloo_ranks_on_the_device_host_sum_right_to_64_mib(rank):
    result = device("gloo-world2", rank)
    sweep = collective_sweep(result)
    assert sweep is not None
    assert (sweep.collective, sweep.world, sweep.sizes[-1].nbytes) == ("gloo all-reduce", 2, 2**26)
    assert check_sweep_correct(sweep) == []
    assert check_sweep_bandwidth(sweep, 1.0, 2**26) == []  # 1.735 GB/s over lo
