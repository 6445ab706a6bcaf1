"""Record, on a GPU host, every raw output infergate's GPU parsers read; then read them back.

    python3 scripts/gpu_probe.py OUT_DIR [--tar FILE.tgz]   # on the GPU host: no docker, no sshd
    python3 scripts/gpu_probe.py --parse OUT_DIR|FILE.tgz    # anywhere: parsers and judges, a table

Collecting uses the standard library only (torch where importable). Each step writes one file
named as in selftest/data/h200/ and goes on when it fails; summary.json holds every step's exit
status, wall time and error, and the all-reduce bandwidths. It starts one foreign GPU holder
(12 GiB on GPU 0) and kills it before the all-reduce runs. NVLink multicast stays off
(NCCL_NVLS_ENABLE=0 ...), as shared hosts require. --tar bundles OUT_DIR into one file, for
tools that bring back few files (the device tool: 8), e.g.
    python3 scripts/gpu_probe.py /tmp/gpu-probe --tar $OUT/gpu-probe.tgz
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

DEADLINE_S = 180
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
NO_MULTICAST |= {"NVSHMEM_DISABLE_NVLS": "1"}
SOCKETS_ONLY = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1"}
SOCKETS_ONLY |= {"NCCL_SOCKET_IFNAME": "lo"}
QUERY_GPU = "index,name,uuid,driver_version,memory.total,memory.used,memory.free,compute_cap"
QUERY_APPS = "pid,process_name,used_memory,gpu_uuid"

CUINIT = r"""
import ctypes, sys
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    sys.exit(f"cuInit error: libcuda.so.1 not loadable: {e}")
rc = lib.cuInit(0); v = ctypes.c_int(); lib.cuDriverGetVersion(ctypes.byref(v))
name = ctypes.c_char_p(); lib.cuGetErrorName(rc, ctypes.byref(name))
print(f"cuInit rc={rc} name={name.value.decode() if name.value else None} driverVersion={v.value}")
try:
    import torch
except ImportError:
    sys.exit("torch missing: no tensor made")
try:
    torch.zeros(1, device="cuda"); print("torch cuda ok", torch.version.cuda)
except Exception as e:
    print("torch cuda error:", type(e).__name__, str(e).splitlines()[0])
"""
TORCH_FACTS = r"""
import json, torch
n = torch.cuda.device_count()
print(json.dumps({"torch": torch.__version__, "torch_cuda": torch.version.cuda,
  "nccl": list(torch.cuda.nccl.version()) if n else None,
  "devices": [torch.cuda.get_device_name(i) for i in range(n)],
  "mem_get_info": [list(torch.cuda.mem_get_info(i)) for i in range(n)]}))
"""
HOLDER = r"""
import sys, time, torch
x = torch.empty(12 * 2**30, dtype=torch.uint8, device="cuda:0"); torch.cuda.synchronize()
print("holding", flush=True); time.sleep(float(sys.argv[1]))
"""
WORKER = r"""
import os, time, torch, torch.distributed as dist
from datetime import timedelta
backend = os.environ.get("BACKEND", "nccl")
dist.init_process_group(backend, timeout=timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "60"))))
rank, world = dist.get_rank(), dist.get_world_size()
dev = "cpu"
if backend == "nccl":
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank))); dev = "cuda"
x = torch.ones(1 << 20, device=dev); dist.all_reduce(x)
print(f"rank{rank} ok sum={x[0].item()}", flush=True)
if backend == "nccl":
    n = int(os.environ.get("AR_BYTES", str(1 << 30))) // 2; it = 10
    y = torch.ones(n, dtype=torch.bfloat16, device=dev)
    for _ in range(3): dist.all_reduce(y)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(it): dist.all_reduce(y)
    torch.cuda.synchronize(); dt = (time.perf_counter() - t) / it
    algbw = n * 2 / dt / 1e9; busbw = algbw * 2 * (world - 1) / world
    if rank == 0:
        print(f"world={world} bytes={n * 2} time_ms={dt * 1e3:.2f} "
              f"algbw_GBps={algbw:.1f} busbw_GBps={busbw:.1f}", flush=True)
dist.destroy_process_group()
"""

STARTED: list[subprocess.Popen[bytes]] = []


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a process this script started, and its process group (torchrun's workers)."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue


def start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    full = {**os.environ, **NO_MULTICAST, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full, start_new_session=True
    )
    STARTED.append(proc)
    return proc


class Recorder:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.steps: list[dict[str, Any]] = []
        out.mkdir(parents=True, exist_ok=True)

    def run(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        trailer: bool = False,
        keep: str | None = None,
    ) -> str:
        """Run argv, write its stdout+stderr to `name`; never raises."""
        began, step = time.monotonic(), {"step": name, "argv": argv, "env": env or {}}
        try:
            proc = start(argv, env)
            try:
                raw, _ = proc.communicate(timeout=DEADLINE_S)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                stop(proc)
                raw = proc.communicate()[0] + f"\ntimed out after {DEADLINE_S} s\n".encode()
                rc = 124  # as `timeout` exits
            text = raw.decode(errors="replace")
        except OSError as e:  # the tool is missing
            text, rc, step["error"] = f"{argv[0]}: missing ({e})\n", 127, str(e)
        if keep:
            text = "".join(line for line in text.splitlines(True) if re.search(keep, line))
        text += f"exit={rc}\n" if trailer else ""
        return self.write(name, text, {**step, "rc": rc, "wall_s": _since(began)})

    def write(self, name: str, text: str, step: dict[str, Any]) -> str:
        (self.out / name).write_text(text)
        self.steps.append(step)
        print(f"{name}: rc={step.get('rc')} {step.get('wall_s', 0)} s {step.get('note', '')}")
        return text

    def read(self, name: str, path: str) -> None:
        try:
            self.write(name, Path(path).read_text(), {"step": name, "rc": 0})
        except OSError as e:
            self.write(name, f"{path}: {e.strerror}\n", {"step": name, "rc": 1, "error": str(e)})


def _since(began: float) -> float:
    return round(time.monotonic() - began, 2)


def collect_host(rec: Recorder) -> None:
    rec.read("proc-driver-version.txt", "/proc/driver/nvidia/version")
    rec.run("nvidia-smi.txt", ["nvidia-smi"])
    rec.run(
        "query-gpu.csv", ["nvidia-smi", f"--query-gpu={QUERY_GPU}", "--format=csv,noheader,nounits"]
    )
    rec.run("query-gpu-units.csv", ["nvidia-smi", f"--query-gpu={QUERY_GPU}", "--format=csv"])
    rec.run("compute-apps-empty.csv", _apps())
    rec.run("compat-ls.txt", ["ls", "-la", "/usr/local/cuda/compat"])
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    rec.run("ldconfig-cuda.txt", [ldconfig, "-p"], keep=r"libcuda\.so|libnvidia-ml")
    rec.run("cuda-version.json", ["cat", "/usr/local/cuda/version.json"])
    rec.run("cuinit-default.txt", [sys.executable, "-c", CUINIT])
    compat = {"LD_LIBRARY_PATH": "/usr/local/cuda/compat"}
    rec.run("cuinit-compat-forced.txt", [sys.executable, "-c", CUINIT], env=compat)


def _apps() -> list[str]:
    return ["nvidia-smi", f"--query-compute-apps={QUERY_APPS}", "--format=csv,noheader,nounits"]


def torch_devices() -> int | None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def collect_holder(rec: Recorder, summary: dict[str, Any]) -> None:
    """A foreign GPU user: this script's own child holding 12 GiB on GPU 0, then killed."""
    holder = start([sys.executable, "-c", HOLDER, "600"])
    summary["holder"] = {"pid": holder.pid}
    try:
        said = _first_line(holder, 120)
        summary["holder"]["said"] = said
        if said != "holding":
            return
        time.sleep(2)
        rec.run("compute-apps.csv", _apps())
        rec.run("nvidia-smi-with-holder.txt", ["nvidia-smi"])
        rec.run("py-facts-with-holder.json", [sys.executable, "-c", TORCH_FACTS])
    finally:
        stop(holder)
        summary["holder"]["killed"] = holder.poll() is not None
        if summary["holder"].get("said") != "holding" and holder.stdout:
            summary["holder"]["output"] = holder.stdout.read().decode(errors="replace")[-2000:]


def _first_line(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline().decode(errors="replace").strip() if ready else "(silent)"


def collect_allreduce(rec: Recorder, summary: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        worker = Path(tmp) / "allreduce_worker.py"
        worker.write_text(WORKER)
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        argv += ["--nproc-per-node", "2", str(worker)]
        runs = {
            "allreduce-default.txt": {"NCCL_DEBUG": "INFO"},
            "allreduce-socket.txt": {"NCCL_DEBUG": "INFO", **SOCKETS_ONLY},
            "gloo-lo.txt": {"BACKEND": "gloo", "GLOO_SOCKET_IFNAME": "lo"},
        }
        for name, env in runs.items():
            text = rec.run(name, argv, env=env, trailer=True)
            summary["allreduce"][name] = _bandwidth(text) | {"wall_s": rec.steps[-1]["wall_s"]}


def _bandwidth(text: str) -> dict[str, Any]:
    found = re.search(r"time_ms=([\d.]+) algbw_GBps=([\d.]+) busbw_GBps=([\d.]+)", text)
    exit_code = re.findall(r"^exit=(\d+)$", text, re.MULTILINE)
    result: dict[str, Any] = {"exit": int(exit_code[-1]) if exit_code else None}
    if found:
        keys = ("time_ms", "algbw_GBps", "busbw_GBps")
        result |= dict(zip(keys, map(float, found.groups()), strict=True))
    return result


def collect(out: Path) -> dict[str, Any]:
    rec = Recorder(out)
    summary: dict[str, Any] = {"python": sys.version.split()[0], "allreduce": {}, "notes": []}
    collect_host(rec)
    devices = torch_devices()
    summary["torch_devices"] = devices
    if devices is None:
        summary["notes"].append("torch not importable (or CUDA broken): holder and NCCL skipped")
    else:
        rec.run("py-facts.json", [sys.executable, "-c", TORCH_FACTS])
        rec.read("meminfo.txt", "/proc/meminfo")  # right after mem_get_info: same moment
        if devices >= 1:
            collect_holder(rec, summary)
        if devices >= 2:
            collect_allreduce(rec, summary)
        else:
            summary["notes"].append(f"{devices} GPU(s): the 2-rank all-reduce needs 2")
    if "meminfo.txt" not in {s["step"] for s in rec.steps}:
        rec.read("meminfo.txt", "/proc/meminfo")
    summary["steps"] = rec.steps
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def load(path: Path) -> dict[str, str]:
    """A recording's files by name, from its directory or from a --tar bundle."""
    if path.is_dir():
        return {p.name: p.read_text(errors="replace") for p in path.iterdir() if p.is_file()}
    files = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member) if member.isfile() else None
            if data is not None:
                files[Path(member.name).name] = data.read().decode(errors="replace")
    return files


def report(path: Path) -> int:
    """Print the recording through infergate's parsers and judges, one row per fact."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from infergate.checks.gpu_recording import summarize_recording

    rows = summarize_recording(load(path))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}} | {value}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--parse":
        return report(Path(argv[1]))
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        summary = collect(Path(argv[0]))
    finally:
        for proc in STARTED:
            stop(proc)
    if len(argv) == 3 and argv[1] == "--tar":
        with tarfile.open(argv[2], "w:gz") as tar:
            tar.add(argv[0], arcname="gpu-probe")
    print(json.dumps({k: summary[k] for k in ("allreduce", "notes", "torch_devices")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
