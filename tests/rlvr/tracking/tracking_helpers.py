"""Shared by the tracker tests: the real mlflow/wandb packages, and a short real training run.

The packages come from the overlay ``bash dev.sh setup-trackers`` builds (``dev.sh test`` puts
it on PYTHONPATH). Without them the tests skip, saying how to get them; under
``RLVR_REQUIRE_TRACKERS=1`` (``.ci/run``) their absence is a failure.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import SMALL_MODEL  # noqa: E402 (shared trainer-test overrides)

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def require(package: str) -> Any:
    """Import ``package`` or skip (fail under ``RLVR_REQUIRE_TRACKERS=1``)."""
    try:
        return importlib.import_module(package)
    except ImportError:
        message = (f"{package} is not installed: run the tracker tests with "
                   "PYTHONPATH=$(bash dev.sh setup-trackers)")
        if os.environ.get("RLVR_REQUIRE_TRACKERS") == "1":
            pytest.fail(message)
        pytest.skip(message)


def tiny_run(out: Path, *overrides: str) -> list[str]:
    """Overrides of a 2-step run of the tiny model (no warm-up) with 2 held-out tasks."""
    return SMALL_MODEL + [
        "sft.enabled=false", f"trainer.output_dir={out}", "trainer.steps=2",
        "trainer.progress=false", "trainer.threads=1", "trainer.checkpoint_every=1",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "eval.tasks=2", "eval.every=1",
        *overrides,
    ]


def train(out: Path, *overrides: str, log: Any = None) -> Any:
    """Run ``tiny_run(out, *overrides)`` with the real trainer; its ``TrainResult``."""
    from rlvr.config import load_config
    from rlvr.trainer import Trainer

    config = load_config(CONFIGS / "quickstart.yaml", tiny_run(out, *overrides))
    return Trainer(config, log=log or (lambda *_: None)).train()
