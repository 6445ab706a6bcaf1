#!/usr/bin/env bash
# The GPU path of the preflight, run for real on a lent H200 host (the device tool), which has
# no sshd, no Docker and no `openai`: the suite, installed from its own wheel as a user installs
# it, reaches the host through testinfra's local backend (inventories/h200-device.yaml, its
# GPU count and TP set to what the host has). Records, into OUT: the host probe idle and with
# a foreign GPU user, and the suite's own verdicts: `pytest --pyargs infergate.tests_preflight
# -m gpu` green, every phase's `-m gpu` green (none may die on another's imports), then red
# with 12 GiB held on GPU 0 by a process the plan does not know. RAW=1 also runs
# scripts/gpu_probe.py (the raw nvidia-smi, CUDA and NCCL forms) into gpu-probe.tgz.
#   pip download --no-deps -d .whl pytest-testinfra docker pytest-xdist execnet pytest-timeout
#   pip wheel --no-deps -w .whl .          # infergate itself; .whl/ is git-ignored: carry it
#   bash scripts/device_gpu_run.sh OUT
set -u
OUT=${1:?usage: device_gpu_run.sh OUT}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L | grep -c '^GPU ')
sed -e "s/^    gpus: 2/    gpus: $gpus/" -e "s/^  tensor_parallel: 2/  tensor_parallel: $gpus/" \
  inventories/h200-device.yaml > "$OUT/plan.yaml"
[ "${RAW:-0}" = 1 ] && time python3 scripts/gpu_probe.py /tmp/gpu-probe --tar "$OUT/gpu-probe.tgz"
cd /tmp || exit 1  # the installed package, not the checkout's folders, is what runs
probe() {
  python3 -c 'from infergate.checks.probe import plan_sections, probe_script
print(probe_script(plan_sections("none-on-this-host", "/tmp/no-model")))' | sh > "$1"
}
suite() {
  local name=$1; shift
  python3 -m pytest -p no:cacheprovider -rs --inventory="$OUT/plan.yaml" -m gpu --pyargs "$@" \
    > "$OUT/$name.txt" 2>&1
}
nvidia-smi -L
python3 -c 'import openai' 2>&1 | tail -1  # the inference phase's client: absent here
probe "$OUT/probe-idle.txt"
time suite gpu-green infergate.tests_preflight
time suite gpu-green-all infergate.tests_preflight infergate.tests_deploy infergate.tests_inference
# a foreign GPU user: 12 GiB held on GPU 0 by a process the plan does not know
python3 -c 'import torch, time
x = torch.ones(12 * 2**30, dtype=torch.uint8, device="cuda:0"); time.sleep(300)' &
holder=$!
for _ in $(seq 60); do
  nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q . && break; sleep 1
done
probe "$OUT/probe-holder.txt"
time suite gpu-red infergate.tests_preflight
kill $holder; wait
tail -n 12 "$OUT"/gpu-*.txt
