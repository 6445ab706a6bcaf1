#!/usr/bin/env bash
# The full tier's GPU load (infergate/checks/scripts/gpu_load.py), run for real on a lent GPU
# host (the device tool), which has no Docker: the host's python and torch run the script as
# the probe container would, with the suite's own arguments (load_command). Records into OUT:
# the load for 10 s and for 3 s (`time` of each: the part's wall), the kernel log as the host
# probe reads it before and after, nvidia-smi -q -d PERFORMANCE after, and whether dcgmi is there.
#   bash scripts/device_gpu_load.sh OUT
set -u
OUT=${1:?usage: device_gpu_load.sh OUT}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
kernel_log() {
  python3 -c 'from infergate.checks.kernel_log import KERNEL_LOG; print(KERNEL_LOG)' | sh > "$1"
}
# load_command's argv, its constants read from the module's source: the host has no docker-py,
# which the package's import of infergate.checks.gpu_load pulls in
load() {
  python3 -c 'import ast, os, sys
tree = ast.parse(open("infergate/checks/gpu_load.py").read())
found = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
         for t in n.targets if isinstance(t, ast.Name) and t.id in ("LOAD_FIELDS", "SAMPLE_INTERVAL_S")}
script = "infergate/checks/scripts/gpu_load.py"
args = [sys.argv[1], "%g" % found["SAMPLE_INTERVAL_S"], ",".join(found["LOAD_FIELDS"])]
os.execvp("python3", ["python3", script, *args])' "$1"
}
{
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
  command -v dcgmi nv-hostengine || echo "no dcgmi, no nv-hostengine"
} > "$OUT/host.txt" 2>&1
kernel_log "$OUT/kernel-before.txt"
{ time load 10 > "$OUT/gpu-load-10s.txt"; } 2> "$OUT/time-10s.txt"
kernel_log "$OUT/kernel-after.txt"
nvidia-smi -q -d PERFORMANCE > "$OUT/q-performance-after.txt" 2>&1
sleep 5  # back to idle clocks before the short run
{ time load 3 > "$OUT/gpu-load-3s.txt"; } 2> "$OUT/time-3s.txt"
tail -n 3 "$OUT"/time-*.txt
grep -c . "$OUT"/gpu-load-*.txt
