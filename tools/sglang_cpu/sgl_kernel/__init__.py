"""CPU stand-in for ``sgl_kernel`` inside the sglang test venv (never rlvr's own venv).

PyPI's ``sgl-kernel`` / ``sglang-kernel`` wheels hold CUDA code only; sglang 0.5.23 with
``SGLANG_USE_CPU_ENGINE=1`` imports these ``*_cpu`` names at module level. On the dense-model
path rlvr's tests use (generate, weight reload, flush, release/resume) only
``assign_req_to_token_pool_cpu`` could be reached; it is implemented in plain torch with the
semantics of sglang's Triton kernel ``assign_req_to_token_pool``. Every other name raises
``NotImplementedError`` naming itself if it is ever called (speculative decoding, KV-cache
moves, AMX paths), so a test hitting one fails loudly instead of computing garbage.
"""

from __future__ import annotations

from typing import Any, NoReturn

import torch

__version__ = "0.0.0+rlvr.cpu.standin"


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """``req_to_token[req_pool_indices[i], start[i]:end[i]] = out_cache_loc[slice i]``.

    ``out_cache_loc`` holds the new slots of all requests back to back, request ``i`` taking
    ``end[i] - start[i]`` of them (the layout of sglang's Triton kernel). ``pool_len`` is
    ``req_to_token.shape[1]``.
    """
    del pool_len
    offset = 0
    for i in range(req_pool_indices.numel()):
        start, end = int(start_offset[i]), int(end_offset[i])
        n = end - start
        row = int(req_pool_indices[i])
        req_to_token[row, start:end] = out_cache_loc[offset : offset + n].to(req_to_token.dtype)
        offset += n


def _missing(name: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"sgl_kernel.{name} is not implemented by rlvr's CPU stand-in (tools/sglang_cpu)"
        )

    kernel.__name__ = name
    return kernel


_NAMES = (
    "copy_all_layer_kv_cache_cpu", "rotate_input_ids_cpu", "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu", "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu", "build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu",
    "build_draft_decode_metadata_cpu",
)
globals().update({name: _missing(name) for name in _NAMES})
