"""Runs INSIDE the planned image (or on a GPU host's own python): a bounded bf16 matmul load on
every visible GPU at once for SECONDS, while `nvidia-smi --query-gpu` is sampled every
INTERVAL seconds. argv: SECONDS INTERVAL FIELDS (nvidia-smi's comma-separated field list).

Prints two `@@@ name rc` sections: `gpu-load` (JSON: each GPU's matmuls and TFLOP/s, or its
error) and `gpu-samples` (CSV lines `t_s, <nvidia-smi's fields>`, t_s seconds from the load's
start, negative before it). Standard library and torch; writes nothing (docs/checks.md#gpu-load).
"""

import json
import os
import subprocess
import sys
import threading
import time
import traceback

SIZE = 8192  # 8192^3 bf16: 1.6 ms on an H100, so the deadline is overshot by milliseconds
BATCH = 8  # matmuls between synchronisations
SMI_TIMEOUT_S = 10


def section(name, body, rc=0):
    sys.stdout.write(f"\n@@@ {name} {rc}\n{body}\n")
    sys.stdout.flush()


def sampler(fields, interval, stop, rows, said):
    """nvidia-smi once per INTERVAL until STOP, each row stamped with the monotonic time."""
    command = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
    while not stop.is_set():
        began = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            said.append((127 if isinstance(e, OSError) else 124, f"{type(e).__name__}: {e}"))
            return
        if done.returncode != 0:
            said.append((done.returncode, (done.stdout + done.stderr).strip()[-500:]))
            return
        at = (began + time.monotonic()) / 2
        rows.extend((at, line) for line in done.stdout.splitlines() if line.strip())
        stop.wait(max(0.0, interval - (time.monotonic() - began)))


def load(torch, index, seconds, ready, start, result):
    """Warm up on GPU INDEX, wait at READY, then matmuls until SECONDS past START[0]."""
    count = 0
    try:
        device = torch.device("cuda", index)
        a = torch.randn(SIZE, SIZE, device=device, dtype=torch.bfloat16)
        b = torch.randn(SIZE, SIZE, device=device, dtype=torch.bfloat16)
        c = torch.mm(a, b)
        torch.cuda.synchronize(device)
    except Exception as e:
        result[index] = {"index": index, "error": f"{type(e).__name__}: {e}"}
        ready.wait()
        return
    ready.wait()
    end = start[0] + seconds
    while time.monotonic() < end:
        for _ in range(BATCH):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize(device)
        count += BATCH
    took = time.monotonic() - start[0]
    tflops = 2 * SIZE**3 * count / took / 1e12
    result[index] = {"index": index, "matmuls": count, "seconds": round(took, 3)}
    result[index]["tflops"] = round(tflops, 1)


def main(seconds, interval, fields):
    began = time.monotonic()
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # torch's indices are nvidia-smi's
    stop, rows, said = threading.Event(), [], []
    smi = threading.Thread(target=sampler, args=(fields, interval, stop, rows, said), daemon=True)
    smi.start()
    body = {"seconds": seconds, "interval_s": interval, "size": SIZE}
    try:
        import torch

        body["torch"] = torch.__version__
        gpus = torch.cuda.device_count()
        start, result = [0.0], {}
        # the barrier's action stamps the start before any thread leaves it
        ready = threading.Barrier(gpus + 1, action=lambda: start.__setitem__(0, time.monotonic()))
        threads = [
            threading.Thread(target=load, args=(torch, i, seconds, ready, start, result))
            for i in range(gpus)
        ]
        for t in threads:
            t.start()
        ready.wait()
        for t in threads:
            t.join()
        body["gpus"] = [result.get(i, {"index": i, "error": "no result"}) for i in range(gpus)]
        rc = 0
    except BaseException as e:
        body["error"] = f"{type(e).__name__}: {e}"
        body["trace"] = traceback.format_exc()[-2000:]
        start, rc = [time.monotonic()], 1
    time.sleep(interval)  # one sample after the load: the GPU coming back to idle
    stop.set()
    smi.join(SMI_TIMEOUT_S + 1)
    body["wall_s"] = round(time.monotonic() - began, 3)
    section("gpu-load", json.dumps(body), rc)
    lines = [f"{at - start[0]:.3f}, {line}" for at, line in rows]
    rc, error = said[0] if said else (0, "")
    section("gpu-samples", "\n".join([*lines, error] if error else lines), rc)


if __name__ == "__main__":
    main(float(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
