"""The sgl_kernel of the lab's SGLang CPU image: one function in pure torch, the rest absent.

sgl_kernel's CPU build is not on PyPI and needs AVX-512 with AMX. With
SGLANG_USE_CPU_ENGINE=1, SGLang imports `*_cpu` functions from it at module level, by name,
in modules its scheduler imports whatever the model (read in 0.5.20 and 0.5.23):
sglang/srt/mem_cache/allocation.py (`assign_req_to_token_pool_cpu`, run for every batch),
and for KV moves and speculative decoding kernels/ops/kvcache/cache_move.py and
kernels/ops/speculative/*.py. The first is here; every other `*_cpu` name imports as a
function that raises when called (the lab serves no speculative decoding). Any other name
is missing, as when sgl_kernel is not installed.

This module registers no torch ops: SGLang takes its AMX kernels only where
`torch.ops.sgl_kernel.convert_weight_packed` exists (utils/common.py's
_is_intel_amx_backend_available), so they stay off.
"""

from collections.abc import Callable
from typing import Any, NoReturn

import torch


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """What allocation.py's Triton kernel `assign_req_to_token_pool` does: request i's new
    cache slots, the next end-start entries of OUT_CACHE_LOC, go to its row of
    REQ_TO_TOKEN at columns start..end. POOL_LEN is that row's length (the kernel's stride)."""
    del pool_len  # the row length is req_to_token's own second dimension here
    taken = 0
    for row, start, end in zip(
        req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True
    ):
        req_to_token[row, start:end] = out_cache_loc[taken : taken + end - start]
        taken += end - start


def __getattr__(name: str) -> Callable[..., NoReturn]:
    if not name.endswith("_cpu"):
        raise AttributeError(name)

    def absent(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"sgl_kernel.{name}: not in the lab's stand-in sgl_kernel")

    return absent
