"""Where ``model.path`` points, as a HuggingFace folder every part of a run can load.

``model.path`` is one of: None (the built-in tiny model, built once into the cache by
``rlvr.tiny``), a HF folder (used as it is), or a ``.gguf`` file (imported once into the cache
by ``rlvr.gguf_import``: a plain safetensors folder with the tokenizer and chat template). The
learner, the engines, the warm-up and the exports then see a folder only.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.config.schema import ModelConfig


def model_folder(model: ModelConfig) -> Path:
    """The folder for ``model``, building or importing it on first use (idempotent, atomic)."""
    if model.path is None:
        from rlvr.tiny import tiny_model_dir

        return tiny_model_dir(model.tiny)
    from rlvr.gguf_import import resolve_model_path

    return resolve_model_path(model.path, key="model.path")


__all__ = ["model_folder"]
