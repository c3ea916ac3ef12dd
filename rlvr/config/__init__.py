"""Configuration: the typed training/SFT configs, their YAML loader and the checks they run.

- ``schema``: ``TrainConfig`` / ``SFTConfig`` and their sections (the keys users write);
- ``loader``: YAML + dotted overrides -> plain dicts (``merge``), unknown keys named;
- ``checks``: the field helpers every config dataclass uses (bounds, choices, unknown fields);
- ``docs``: the generated configuration reference (``python -m rlvr.config.docs``).

``from rlvr.config import TrainConfig, load_config`` is the short public path. The names resolve
lazily so that section configs elsewhere (e.g. ``rlvr.learner.config``) can use ``checks``
without importing the whole schema.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlvr.config.loader import merge
    from rlvr.config.schema import SFTConfig, TrainConfig, load_config

_PUBLIC = {
    "SFTConfig": "rlvr.config.schema",
    "TrainConfig": "rlvr.config.schema",
    "load_config": "rlvr.config.schema",
    "merge": "rlvr.config.loader",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'rlvr.config' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["SFTConfig", "TrainConfig", "load_config", "merge"]
