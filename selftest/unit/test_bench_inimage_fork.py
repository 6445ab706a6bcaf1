"""scripts/bench_inimage_fork.py: the script it runs in the image is in_image.py's own fact
functions with its timed driver in place of main (the lab run is the script's:
`flock /tmp/infergate-lab.lock .venv/bin/python scripts/bench_inimage_fork.py`)."""

import importlib

import pytest

from selftest.unit.test_profile_preflight import SCRIPTS


def test_the_experiment_is_the_probes_own_facts_with_a_timed_driver_instead_of_main(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    bench = importlib.import_module("bench_inimage_fork")
    script = bench.experiment()
    compile(script, "experiment", "exec")
    for fact in (
        "def versions(",
        "def model_config(",
        "def registry(",
        "def flags(",
        "def chat_template(",
    ):
        assert fact in script
    assert "\n    main()" not in script
    assert script.rstrip().endswith(
        "timed_facts(sys.argv[1], sys.argv[2], sys.argv[3:])\nos._exit(0)"
    )
    assert bench.TIMED.search("x\nTIMED import=4.512 facts=1.190\n").groups() == ("4.512", "1.190")
