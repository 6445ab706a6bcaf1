"""vLLM's AVX2 path on an AVX-512 machine: imported at every Python start-up (a .pth line) in
the lab's forced-AVX2 test image.

vLLM asks torch.cpu which ISA the CPU has (`_is_avx512_supported`, `_is_avx512_bf16_supported`,
`_is_amx_tile_supported`) when it picks its kernel build (vllm/platforms/cpu.py) and its
attention, MoE and GEMM paths. This makes all three answer False as torch.cpu is first
imported; the image's ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=AVX2 do the same for
torch's and oneDNN's own dispatch. The AVX-512 builds of vLLM's kernels (`vllm._C`,
`vllm._C_AVX512`) cannot be imported at all, as on a CPU without AVX-512, where importing
them dies of SIGILL.
"""

import importlib.abc
import importlib.util
import sys

AVX512_BUILDS = ("vllm._C", "vllm._C_AVX512")
ISA_PROBES = ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported")


class _AsAnAvx2Cpu(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in AVX512_BUILDS:
            raise ImportError(f"{name} is an AVX-512 build: this image plays a CPU without it")
        if name != "torch.cpu":
            return None
        sys.meta_path.remove(self)  # the real finder finds torch.cpu ...
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)  # ... and this one still guards the AVX-512 builds
        real = spec.loader.exec_module

        def exec_module(module):
            real(module)
            for probe in ISA_PROBES:
                setattr(module, probe, lambda: False)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AsAnAvx2Cpu())
