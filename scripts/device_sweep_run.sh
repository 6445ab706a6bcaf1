#!/usr/bin/env bash
# The in-image probe's collective sweep (infergate/checks/scripts/in_image.py) run for real on
# a lent 1-GPU host (kind nvidia-h200, which may lend an H100) on the host's python (no Docker
# there), facts taken as cached: world 1 NCCL to the default 1 GiB (busbw is 0 by definition
# at world 1: the latency form) and to 128 MiB and 8 B; two ranks on the one GPU (recorded as
# NCCL answers); two Gloo ranks on the CPU (CUDA hidden) to 64 MiB.
#   bash scripts/device_sweep_run.sh OUT
set -u
OUT=${1:?usage: device_sweep_run.sh OUT}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1 GLOO_SOCKET_IFNAME=lo
S=infergate/checks/scripts/in_image.py
ENGINE='{"imports": [], "registry": "none", "parser": "vllm_parser", "model_flag": ""}'
rank() {  # rank CASE N WORLD PORT [ENV...]
  local case=$1 n=$2 world=$3 port=$4; shift 4
  local began=$EPOCHREALTIME rc
  env "$@" MASTER_PORT=$port LOCAL_RANK=$n python3 $S "$ENGINE" /tmp/no-model $n $world 60 cached \
    > "$OUT/sweep-$case-rank$n.txt" 2>&1
  rc=$?
  echo "wall_s=$(python3 -c "print(round($EPOCHREALTIME - $began, 2))") exit=$rc" >> "$OUT/sweep-$case-rank$n.txt"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
python3 -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())' >> "$OUT/gpu.txt" 2>&1
command -v all_reduce_perf all_gather_perf >> "$OUT/gpu.txt" || echo "no nccl-tests on PATH" >> "$OUT/gpu.txt"
rank nccl-world1 0 1 29611
rank nccl-world1-8B 0 1 29612 INFERGATE_SWEEP_MAX_BYTES=8
rank nccl-world1-128MiB 0 1 29613 INFERGATE_SWEEP_MAX_BYTES=134217728
rank nccl-shared-gpu 0 2 29614 & rank nccl-shared-gpu 1 2 29614; wait
rank gloo-world2 0 2 29615 CUDA_VISIBLE_DEVICES= INFERGATE_SWEEP_MAX_BYTES=67108864 &
rank gloo-world2 1 2 29615 CUDA_VISIBLE_DEVICES= INFERGATE_SWEEP_MAX_BYTES=67108864; wait
grep -h -A1 "@@@ rendezvous" "$OUT"/sweep-*.txt | cut -c1-1500
tail -n1 "$OUT"/sweep-*.txt
