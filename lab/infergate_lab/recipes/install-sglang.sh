#!/bin/sh
# The lab's SGLang CPU image's recipe, run as install-engine.sh is (engine_image.py).
# Arguments: the pip requirements, pinned, sglang first. sglang goes in without its
# dependencies: they are CUDA wheels (torch 2.14.1 with nvidia-*, flashinfer, cutlass), GBs
# that cannot run here; the rest of the arguments are what its server imports on CPU.
set -eu
python3 -m venv /opt/venv
pip="/opt/venv/bin/pip install --no-cache-dir --progress-bar off"
sglang="$1"
shift
$pip --no-deps "$sglang"
$pip "$@"
# the stand-ins for sgl_kernel and torchvision (recipes/sglang-cpu/*/__init__.py say why)
site=$(/opt/venv/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp -r /mnt/recipe/sglang-cpu/sgl_kernel /mnt/recipe/sglang-cpu/torchvision "$site"/
find "$site/sgl_kernel" "$site/torchvision" -name __pycache__ -prune -exec rm -rf {} +
# the proof the issue asks for, as a node will run it: the CLI parses, the server imports
export SGLANG_USE_CPU_ENGINE=1
/opt/venv/bin/python3 -m sglang.launch_server --help >/dev/null
/opt/venv/bin/python3 -c 'import sglang.srt.entrypoints.http_server'
/opt/venv/bin/pip list --format freeze | grep -iE '^(sglang|torch|triton|transformers)=='
rm -rf /root/.cache /tmp/* /var/tmp/*
