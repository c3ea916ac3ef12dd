"""Configuration: the typed training/SFT configs, their YAML loader and the generated reference.

- ``schema``: ``TrainConfig`` / ``SFTConfig`` and their sections (the keys users write);
- ``loader``: YAML + dotted overrides -> plain dicts (``merge``), unknown keys named;
- ``engine``: the rollout engine's section, shared by training and ``rlvr eval``;
- ``docs``: the generated configuration reference (``python -m rlvr.config.docs``).

The field helpers every config dataclass uses (bounds, choices, unknown fields) are the leaf
module ``rlvr.config_checks``, outside this package, so that section configs elsewhere (e.g.
``rlvr.learner.config``) use them without importing the schema that composes them.

``from rlvr.config import TrainConfig, load_config`` is the short public path.
"""

from __future__ import annotations

from rlvr.config.loader import merge
from rlvr.config.schema import SFTConfig, TrainConfig, load_config

__all__ = ["SFTConfig", "TrainConfig", "load_config", "merge"]
