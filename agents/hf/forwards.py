"""The transformers engine's two ways to run a forward and keep its KV cache.

``TransformersEngine`` (``rlvr.agents.hf.engine``) schedules requests and samples; it runs every
prefill and decode step, and keeps, drops and merges its rows' KV cache, through one of these:

* ``LeanForward``: ``rlvr.agents.hf.lean_decoder``'s forward with preallocated ``KVBuffer`` caches
  (Qwen2, Llama, Mistral; see ``lean_unsupported``);
* ``ModuleForward``: the module's own forward with a transformers ``DynamicCache`` (any causal
  LM).

Both keep the cache left-padded with one column per attention-mask column, so the engine's mask
bookkeeping is the same for either.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.agents.hf.lean_decoder import KVBuffer, LeanDecoder
from rlvr.hf_compat import cache_kwargs


def _select_cache(cache: Any, rows: torch.Tensor, start: int) -> None:
    """Keep batch ``rows`` and columns ``start:`` of every layer of ``cache`` (in place)."""
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, rows)[:, :, start:]
        layer.values = layer.values.index_select(0, rows)[:, :, start:]


def _merge_caches(a: Any, b: Any, width: int) -> Any:
    """A new ``DynamicCache``: the rows of ``a`` then ``b``, both left-padded to ``width``."""
    from transformers import DynamicCache

    return DynamicCache(
        [
            (
                torch.cat([left_pad(la.keys, width, 2), left_pad(lb.keys, width, 2)]),
                torch.cat([left_pad(la.values, width, 2), left_pad(lb.values, width, 2)]),
            )
            for la, lb in zip(a.layers, b.layers)
        ]
    )


def left_pad(x: torch.Tensor, width: int, dim: int, value: float = 0) -> torch.Tensor:
    """Left-pad dimension ``dim`` of ``x`` to ``width``."""
    extra = width - x.shape[dim]
    if extra <= 0:
        return x
    shape = list(x.shape)
    shape[dim] = extra
    return torch.cat([x.new_full(shape, value), x], dim=dim)


ROOM = 64
"""The most free columns a new lean KV buffer is given (it grows by reallocating beyond)."""


class ModuleForward:
    """The module's own forward with a transformers ``DynamicCache`` (any causal LM)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def _run(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
             cache: Any) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         **cache_kwargs(self.model, cache), logits_to_keep=1)
        return out.logits[:, -1]

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                room: int) -> tuple[Any, torch.Tensor]:
        """A new cache holding the left-padded prompts, and their last logits ``(B, V)``."""
        from transformers import DynamicCache

        cache = DynamicCache()
        return cache, self._run(ids, mask, positions, cache)

    def decode(self, cache: Any, last: torch.Tensor, positions: torch.Tensor,
               mask: torch.Tensor) -> torch.Tensor:
        """Feed ``last`` ``(B, 1)``, extending ``cache``; ``mask`` covers the new column too."""
        return self._run(last, mask, positions, cache)

    def select(self, cache: Any, rows: torch.Tensor, start: int) -> Any:
        """Keep batch ``rows`` and columns ``start:``."""
        _select_cache(cache, rows, start)
        return cache

    def merge(self, a: Any, b: Any, width: int, room: int) -> Any:
        """The rows of ``a`` then ``b``, both left-padded to ``width`` columns."""
        return _merge_caches(a, b, width)


class LeanForward:
    """``rlvr.agents.hf.lean_decoder``'s forward, with preallocated ``KVBuffer`` caches."""

    def __init__(self, model: Any) -> None:
        self.decoder = LeanDecoder(model)

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                room: int) -> tuple[KVBuffer, torch.Tensor]:
        """A new buffer (with ``room`` free columns) holding the prompts, and their last logits."""
        kv = self.decoder.new_buffer(ids.shape[0], ids.shape[1] + room)
        return kv, self.decoder.prefill(ids, mask.bool(), positions, kv)

    def decode(self, cache: KVBuffer, last: torch.Tensor, positions: torch.Tensor,
               mask: torch.Tensor) -> torch.Tensor:
        """Feed ``last`` ``(B, 1)`` into column ``cache.end``; ``mask`` covers it too."""
        return self.decoder.decode(last, positions, cache, mask.bool())

    def select(self, cache: KVBuffer, rows: torch.Tensor, start: int) -> KVBuffer:
        """Keep batch ``rows`` and columns ``start:``."""
        cache.select(rows, start)
        return cache

    def merge(self, a: KVBuffer, b: KVBuffer, width: int, room: int) -> KVBuffer:
        """The rows of ``a`` then ``b``, right-aligned in ``width`` columns, ``room`` to spare."""
        return KVBuffer.merged(a, b, room)
