"""The GPUs' telemetry beside the memory guard's ticks, on a composed form of real parts
(selftest/data/h200-device/telemetry: a lent H200's sampler ticks and its nvidia-smi rows under
a matmul load, re-timed into one stream; no device time was left to record the loop itself),
the loop run for real in local shells with an nvidia-smi that replays those rows, and the
rows in results.json and report.html."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from infergate.checks.gpu_load import Sample
from infergate.checks.memguard import GPU_ROW, GPUS, TICK, MemorySample, sampler_script, ticks
from infergate.deploy.memguard import MemoryGuard
from infergate.reports.gpu_curve import GpuCurve
from infergate.reports.inference import ReportMeta, Results
from infergate.reports.inference_html import render_html
from infergate.reports.inference_json import read_results, render_json
from selftest.unit.test_memguard import lab_plan

TELEMETRY = Path(__file__).resolve().parents[1] / "data" / "h200-device" / "telemetry"
RECORDED = TELEMETRY / "sampler-gpus.composed.txt"


def recorded_lines() -> list[str]:
    return RECORDED.read_text().splitlines()


def gpu_rows(lines: list[str]) -> list[Sample]:
    return [i for i in ticks(lines) if isinstance(i, Sample)]


def test_the_recorded_rows_are_read_beside_the_ticks() -> None:
    items = list(ticks(recorded_lines()))
    assert items[0] is False  # 143771 MiB of its own: not unified memory
    rows = [i for i in items if isinstance(i, Sample)]
    memory = [i for i in items if isinstance(i, MemorySample)]
    assert (len(rows), len(memory)) == (29, 4)
    assert {r.index for r in rows} == {0}
    assert all(r.memory_used_mib is not None for r in rows)
    busy = [r for r in rows if r.busy()]
    assert busy, "the matmul loop's rows"
    assert max(r.memory_used_mib or 0 for r in busy) > min(r.memory_used_mib or 0 for r in rows)


def test_a_curve_keeps_every_row_and_reads_the_clock_at_work() -> None:
    (curve,) = GpuCurve.of("node1", "node1 (10.0.0.1)", gpu_rows(recorded_lines()))
    assert curve.t_s[0] == 0.0
    assert list(curve.t_s) == sorted(curve.t_s)
    found = curve.figures()
    assert found.rows == len(curve.t_s)
    assert found.min_busy_sm_mhz is not None
    assert found.min_busy_sm_mhz <= (found.median_busy_sm_mhz or 0)
    assert found.max_memory_used_mib == max(m for m in curve.memory_used_mib if m is not None)
    assert found.clock_event_reasons == ("GPU idle", "SW power cap")  # no fault under load


def test_a_row_cut_short_is_dropped_and_the_next_is_read() -> None:
    row = next(line for line in recorded_lines() if line.startswith(f"{GPU_ROW} "))
    lines = [GPUS, row[: len(row) // 2], f"{TICK} 1.0", "MemTotal: 4 kB", "MemAvailable: 2 kB"]
    lines += ["@@@ end", row]
    assert len(gpu_rows(lines)) == 1


def fake_nvidia_smi(folder: Path) -> Path:
    """An nvidia-smi that answers the sampler's two queries with the recorded answers."""
    lines = recorded_lines()
    head = lines[lines.index(GPUS) + 1]
    rows = [line.split(", ", 1)[1] for line in lines if line.startswith(f"{GPU_ROW} ")]
    (folder / "gpus.csv").write_text(head + "\n")
    (folder / "rows.csv").write_text("\n".join(rows[:1]) + "\n")
    tool = folder / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *memory.total*) cat {folder}/gpus.csv ;; *) cat {folder}/rows.csv ;; esac\n'
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return folder


def test_the_sessions_keep_each_gpus_rows_and_leave_nothing_running(tmp_path) -> None:
    """The guard's loop in local shells, nvidia-smi replaying the recording: each node keeps
    its GPU rows; once the sessions end, no loop of either kind is left."""
    path = f"{fake_nvidia_smi(tmp_path)}:{os.environ['PATH']}"
    plan = lab_plan(memory="off", memory_interval_s=0.2)
    mark = f"IG_TELEMETRY_TEST={tmp_path.name}"

    def session(_node: object, script: str) -> list[str]:
        return ["env", f"PATH={path}", "sh", "-c", f": {mark}; {script}"]

    guard = MemoryGuard(plan.nodes, plan.guard, session, lambda _b: None)
    guard.start()
    try:
        time.sleep(1.5)
    finally:
        guard.stop()
    for kept in guard.nodes.values():
        assert len(kept.gpus) >= 3, kept
        assert kept.gpus[0].name == "NVIDIA H200"
        assert kept.enforced is False
    time.sleep(0.5)  # the GPU loop's own interval, for its kill -0 to see the ticks gone
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert [line for line in ps.stdout.splitlines() if mark in line] == []


def test_results_json_keeps_the_rows_and_the_page_shows_them(tmp_path) -> None:
    curves = tuple(GpuCurve.of("node1", "node1 (10.0.0.1)", gpu_rows(recorded_lines())))
    results = Results(ReportMeta("p", "http://x/v1", "m", "t"), (), gpus=curves)
    page = render_html(results)
    assert "GPUs during the launch and the load" in page
    assert "node1 (10.0.0.1) GPU 0 (NVIDIA H200)" in page
    saved = tmp_path / "results.json"
    saved.write_text(render_json(results))
    assert read_results(saved).gpus == curves
    kept = json.loads(saved.read_text())["gpus"][0]
    assert (kept["figures"]["max_memory_used_mib"], len(kept["sm_mhz"])) == (1139, 29)


def test_no_gpu_rows_no_section() -> None:
    page = render_html(Results(ReportMeta("p", "http://x/v1", "m", "t"), ()))
    assert "GPUs during the launch and the load" not in page


@pytest.mark.parametrize("interval", [1, 0.5])
def test_the_gpu_loop_asks_its_fields_every_interval(interval) -> None:
    script = sampler_script(interval)
    loop = script.split("while kill -0", 1)[1].split("done &", 1)[0]
    assert "memory.used" in loop
    assert "clocks_event_reasons.active" in loop
    assert f"sleep {interval:g}\n" in loop
