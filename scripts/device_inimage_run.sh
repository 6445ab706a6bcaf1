#!/usr/bin/env bash
# The in-image probe script (infergate/checks/scripts/in_image.py) run for real on a lent
# 2×H200 host, straight on the host's python (no Docker there): two ranks on one host, one
# GPU each, as the preflight runs one rank per node. Records each rank's sections for:
# the plan's env (Gloo and NCCL over lo), the same with the engine facts taken as cached (the
# probe then imports torch only), a wrong GLOO_SOCKET_IFNAME, and a rank that never comes
# (the deadline must end it).   bash scripts/device_inimage_run.sh OUT
set -u
OUT=${1:?usage: device_inimage_run.sh OUT}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
S=infergate/checks/scripts/in_image.py
rank() {  # rank CASE N PORT DEADLINE [ENV...]
  local case=$1 n=$2 port=$3 deadline=$4; shift 4
  env "$@" MASTER_PORT=$port LOCAL_RANK=$n python3 $S vllm /tmp/no-model $n 2 $deadline ${FACTS:-fresh} \
    --max-model-len 1024 > "$OUT/inimage-$case-rank$n.txt" 2>&1
}
time { rank ok 0 29531 60 GLOO_SOCKET_IFNAME=lo & rank ok 1 29531 60 GLOO_SOCKET_IFNAME=lo; wait; }
export FACTS=cached
time { rank cached 0 29534 60 GLOO_SOCKET_IFNAME=lo & rank cached 1 29534 60 GLOO_SOCKET_IFNAME=lo; wait; }
unset FACTS
time { rank wrongif 0 29532 60 GLOO_SOCKET_IFNAME=ib9 & rank wrongif 1 29532 60 GLOO_SOCKET_IFNAME=ib9; wait; }
time rank alone 0 29533 20 GLOO_SOCKET_IFNAME=lo
grep -h -A3 "@@@ rendezvous\|@@@ cuda-init" "$OUT"/inimage-*-rank0.txt | cut -c1-400
