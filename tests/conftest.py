"""Shared pytest set-up: quiet tokenizers, and the locally built tiny model every layer tests on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """Directory of the default tiny Qwen2 model + tokenizer (built once, cached)."""
    from rlvr.tiny import tiny_model_dir

    return tiny_model_dir()
