"""Where the probe container cannot start, every in-image test says why, and only why.

The real suite runs against this machine as the lent 2xH200 host's plan describes it
(inventories/h200-device.yaml, testinfra's local backend): its planned image is not here,
and this machine has at most a docker CLI. No test may judge sections that were never
printed ("no CUDA init probe", "no `via` lines", a parse error)."""

from __future__ import annotations

import pytest

from selftest.suite import ROOT, run_suite

DEVICE_PLAN = ROOT / "inventories" / "h200-device.yaml"
IN_IMAGE = {
    "test_in_image.py::test_model_architecture_supported_by_image[h200]",
    "test_in_image.py::test_engine_flags_accepted_by_image[h200]",
    "test_in_image.py::test_no_stray_nccl_conf_in_image[h200]",
    "test_in_image.py::test_rendezvous_all_reduce_across_nodes",
    "test_in_image.py::test_nccl_transport_and_bandwidth",
    "test_gpu.py::test_image_cuda_initialises_on_driver[h200]",
    "test_gpu.py::test_engine_free_memory_near_meminfo[h200]",
}


def test_in_image_tests_name_the_missing_engine_or_image_instead_of_judging_nothing(
    pytester: pytest.Pytester,
) -> None:
    # test_parity reads host facts of its own (the image ID) and says so: not in question here
    run = run_suite(pytester, "-m", "image", "-k", "not parity", inventory=DEVICE_PLAN)
    assert set(run.outcomes) == IN_IMAGE, run.output
    for test in IN_IMAGE:
        outcome = run.outcomes[test]
        assert outcome.status == "skipped", (test, outcome.message)
        assert "the planned image cannot run there" in outcome.message, test
        # no Docker engine (this machine), or the planned image missing where one answers
        assert "Docker engine" in outcome.message or "none-on-this-host missing" in (
            outcome.message
        ), test
        assert "h200 (localhost)" in outcome.message, test
