"""Let PyPI's CUDA torchvision import on CPU torch inside the sglang test venv (never rlvr's venv).

torchvision 0.28's compiled ``_C.so`` does not load against CPU torch; its
``_meta_registrations.py`` then dies on ``register_fake("torchvision::nms")`` because the op schema
was never registered. sglang imports torchvision only for multimodal processors, so registering the
two schemas (no kernels) before torchvision loads is enough. A ``.pth`` file calls :func:`install`
at every interpreter start-up (sglang's scheduler runs in subprocesses); torch itself is imported
only when something imports torchvision, so start-up of unrelated processes stays fast.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library: Any = None  # kept alive: dropping the Library object unregisters the schemas


def _register_schemas() -> None:
    global _library
    if _library is not None:
        return
    import torch

    try:
        torch.ops.torchvision.nms.default  # noqa: B018  (already registered by a working _C)
        return
    except (AttributeError, RuntimeError):
        pass
    _library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _library.define(schema)


class _TorchvisionFinder(importlib.abc.MetaPathFinder):
    """Registers the schemas the first time ``torchvision`` is looked up, then steps aside."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            _register_schemas()
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, _TorchvisionFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionFinder())
