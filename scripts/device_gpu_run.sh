#!/usr/bin/env bash
# The GPU path of the preflight, run for real on a lent 2×H200 host (the device tool), which
# has no sshd, no Docker and no `openai`: the suite reaches it through testinfra's local
# backend (inventories/h200-device.yaml). Records, into OUT: the host probe idle and with a
# foreign GPU user, and the suite's own verdicts: `pytest tests_preflight -m gpu` green,
# plain `pytest -m gpu` (every phase collected: none may die on another's imports) green,
# then red with 12 GiB held on GPU 1 by a process the plan does not know. RAW=1 also runs
# scripts/gpu_probe.py (the raw nvidia-smi, CUDA and NCCL forms) into gpu-probe.tgz.
#   bash scripts/device_gpu_run.sh OUT      (with pytest-testinfra's wheel in .whl/)
set -u
OUT=${1:?usage: device_gpu_run.sh OUT}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
INV=--inventory=inventories/h200-device.yaml
probe() {
  python3 -c 'from infergate.checks.probe import plan_sections, probe_script
print(probe_script(plan_sections("none-on-this-host", "/tmp/no-model")))' | sh > "$1"
}
suite() { local name=$1; shift; python3 -m pytest -p no:cacheprovider "$@" -m gpu $INV > "$OUT/$name.txt" 2>&1; }
nvidia-smi -L
python3 -c 'import openai' 2>&1 | tail -1  # the inference phase's client: absent here
[ "${RAW:-0}" = 1 ] && time python3 scripts/gpu_probe.py /tmp/gpu-probe --tar "$OUT/gpu-probe.tgz"
probe "$OUT/probe-h200.txt"
time suite gpu-green tests_preflight
time suite gpu-green-all
# a foreign GPU user: 12 GiB held on GPU 1 by a process the plan does not know
python3 -c 'import torch, time
x = torch.ones(12 * 2**30, dtype=torch.uint8, device="cuda:1"); time.sleep(300)' &
holder=$!
for _ in $(seq 60); do
  nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q . && break; sleep 1
done
probe "$OUT/probe-h200-holder.txt"
time suite gpu-red tests_preflight
kill $holder; wait
tail -n 12 "$OUT"/gpu-*.txt
