"""scripts/gpu_probe.py: its recording read back through every GPU parser and judge, and its
collection on a machine without GPUs (this project's CI machine kind)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infergate.checks.gpu_recording import summarize_recording

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data"
PROBE = ROOT / "scripts" / "gpu_probe.py"


def recorded(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}


def test_h200_recording_reads_back():
    rows = dict(summarize_recording(recorded(DATA / "h200")))
    assert rows["driver"] == "580.159.04 (kernel module 580.159.04)"
    assert rows["driver CUDA"] == "13.0"
    assert rows["GPU users, idle"] == "none"
    assert rows["GPU users, holder"].startswith("pid 624 (python3) holds 12806 MiB")
    assert rows["cuInit default"] == "ok: 0 CUDA_SUCCESS (driver API 13.0)"
    assert rows["cuInit compat forced"].startswith("FAILS: 803 CUDA_ERROR_SYSTEM_DRIVER_MISMATCH")
    assert rows["compat libs"].endswith("the judge fails (803 expected)")
    assert "does not apply" in rows["engine free memory"]
    assert rows["allreduce-default"].endswith("busbw 323.8 GB/s; rendezvous ok")
    assert rows["allreduce-socket"] == "exit None; NET/Socket; busbw 3.4 GB/s; rendezvous ok"
    assert rows["nccl-wrong-ifname"].startswith("exit 1; no transport lines; no busbw; rendezvous")


def test_missing_and_unreadable_files_do_not_stop_the_table():
    rows = dict(summarize_recording({"query-gpu.csv": "garbage"}))
    assert rows["GPUs"].startswith("unreadable: nvidia-smi printed 'garbage'")
    assert rows["driver CUDA"] == "not recorded (nvidia-smi.txt)"


def test_parse_mode_prints_the_table():
    done = subprocess.run(
        [sys.executable, str(PROBE), "--parse", str(DATA / "h200")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "allreduce-socket     | exit None; NET/Socket; busbw 3.4 GB/s" in done.stdout


def test_collecting_without_gpus_records_what_is_missing(tmp_path):
    if shutil.which("nvidia-smi"):
        pytest.skip("nvidia-smi is on PATH: this machine has GPUs, and the probe would hold one")
    out = tmp_path / "probe"
    subprocess.run(
        [sys.executable, str(PROBE), str(out), "--tar", str(tmp_path / "p.tgz")],
        capture_output=True,
        check=True,
        timeout=120,
    )
    assert (out / "nvidia-smi.txt").read_text().startswith("nvidia-smi: missing")
    assert "MemAvailable:" in (out / "meminfo.txt").read_text()
    assert (tmp_path / "p.tgz").stat().st_size > 0
    rows = dict(summarize_recording(recorded(out)))
    assert rows["driver CUDA"].startswith("unreadable: no 'Driver Version'")
