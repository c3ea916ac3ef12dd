"""The shipped CPU quickstart as its learning test runs it: shared by the test and its seed sweep.

``tests/rlvr/test_trainer.py::test_quickstart_recipe_raises_held_out_accuracy`` runs it once;
``bench/quickstart_seeds.py`` runs it over seeds to choose the test's thresholds (BENCHMARKS.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer_helpers import QUIET

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"

#: The test's overrides of the shipped config: no mid-run evals or checkpoints, 200 held-out
#: tasks scored before and after RL.
OVERRIDES = ["eval.every=0", "eval.tasks=200", "trainer.checkpoint_every=0"]
#: Steps averaged at the start and at the end of RL (1,920 samples each).
FIRST_LAST = 15
#: The test's thresholds (see its docstring for where they come from).
MIN_REWARD_RISE = 0.04
MIN_HELD_OUT_GAIN = 0.06


def run_quickstart(output_dir: Path, seed: int, overrides: list[str] | None = None
                   ) -> dict[str, Any]:
    """Train the quickstart with ``trainer.seed=seed``; what its learning test checks."""
    from rlvr.config import load_config
    from rlvr.trainer import train

    config = load_config(QUICKSTART, QUIET + OVERRIDES + list(overrides or []) + [
        f"trainer.output_dir={output_dir}", f"trainer.seed={seed}"])
    result = train(config, log=lambda *_: None)
    rewards = [m["reward/mean"] for m in result.history]
    return {
        "seed": seed,
        "sft_steps": result.sft_steps,
        "sft_max_steps": config.sft.max_steps,
        "warmup_accuracy": result.warmup_accuracy,
        "final_accuracy": result.final_accuracy,
        "reward_first": sum(rewards[:FIRST_LAST]) / FIRST_LAST,
        "reward_last": sum(rewards[-FIRST_LAST:]) / FIRST_LAST,
        "warmup_seconds": result.warmup_seconds,
        "rl_seconds": result.rl_seconds,
        "total_seconds": result.total_seconds,
    }
