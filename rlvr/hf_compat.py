"""The few places where the transformers releases that pyproject admits differ, in one place.

- The KV-cache keyword of a model's ``forward``: ``past_key_values`` in 4.x and 5.x up to 5.23,
  ``cache`` from 5.24 (which still accepts ``past_key_values`` with a deprecation warning, until
  5.40). A wrong name is not an error: it vanishes into ``**kwargs``, the cache stays empty and
  the model silently runs without its prefix. ``cache_kwargs`` reads the name off the model's
  own ``forward`` signature.
- Whether activation checkpointing is on: ``is_gradient_checkpointing`` (4.x, deprecated in
  5.x) and ``is_activation_checkpointing`` (5.23+) both read the per-module
  ``gradient_checkpointing`` flag, which every release has; ``activation_checkpointing_on``
  reads that flag directly.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from torch import nn

__all__ = ["activation_checkpointing_on", "cache_keyword", "cache_kwargs"]


@functools.lru_cache(maxsize=64)
def _keyword_of(cls: Any) -> str:
    params = inspect.signature(cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_keyword(model: nn.Module) -> str:
    """The keyword of ``model.forward`` for its KV cache: ``cache`` or ``past_key_values``."""
    cls: Any = type(model)
    return _keyword_of(cls)


def cache_kwargs(model: nn.Module, cache: Any) -> dict[str, Any]:
    """``{<the model's cache keyword>: cache, "use_cache": True}``, to splat into a forward call."""
    return {cache_keyword(model): cache, "use_cache": True}


def activation_checkpointing_on(model: nn.Module) -> bool:
    """Whether any submodule of ``model`` recomputes its activations (HF's checkpointing flag)."""
    return any(bool(getattr(m, "gradient_checkpointing", False)) for m in model.modules())
