"""The shipped CPU quickstart as its learning test runs it: shared by the test and its seed sweep.

``tests/rlvr/test_trainer.py::test_quickstart_recipe_raises_held_out_accuracy`` runs it once;
``bench/quickstart_seeds.py`` runs it over seeds to choose the test's thresholds (BENCHMARKS.md).
``run_rl_from`` is the LoRA and asynchronous learning tests' run: the same RL from that run's
warm-up (``output_dir/sft_model``), training a LoRA adapter instead of the whole model (``LORA``;
``bench/quickstart_seeds.py --lora`` runs both over seeds) or one step behind the policy
(``ASYNC``).
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
#: The LoRA run's adapter (every projection) and its learning rate: what BENCHMARKS.md, "LoRA
#: against full fine-tuning", measured against the full quickstart.
LORA = ["actor.lora.rank=16", "actor.lora.alpha=32", "actor.optim.lr=3e-3"]
#: The LoRA learning test's thresholds (see its docstring for where they come from).
LORA_MIN_REWARD_RISE = 0.04
LORA_MIN_HELD_OUT_GAIN = 0.06
#: Asynchronous RL one step behind (``rollout.max_staleness: 1``) with decoupled PPO's importance
#: cap: what BENCHMARKS.md, "Learning over five seeds at k = 1", measured.
ASYNC = ["rollout.max_staleness=1", "actor.tis_cap=2.0"]
#: The asynchronous learning test's thresholds (see its docstring for where they come from).
ASYNC_MIN_REWARD_RISE = 0.04
ASYNC_MIN_HELD_OUT_GAIN = 0.06


def run_quickstart(output_dir: Path, seed: int, overrides: list[str] | None = None
                   ) -> dict[str, Any]:
    """Train the quickstart with ``trainer.seed=seed``; what its learning test checks."""
    from rlvr.config import load_config
    from rlvr.trainer import train

    config = load_config(QUICKSTART, QUIET + OVERRIDES + list(overrides or []) + [
        f"trainer.output_dir={output_dir}", f"trainer.seed={seed}"])
    return _summary(config, train(config, log=lambda *_: None), seed)


def run_lora_from(warm_model: Path, output_dir: Path, seed: int,
                  overrides: list[str] | None = None) -> dict[str, Any]:
    """The quickstart's RL with ``LORA`` from ``warm_model`` (a quickstart run's ``sft_model``)."""
    return run_rl_from(warm_model, output_dir, seed, LORA + list(overrides or []))


def run_rl_from(warm_model: Path, output_dir: Path, seed: int,
                overrides: list[str] | None = None) -> dict[str, Any]:
    """The quickstart's RL (no warm-up) from ``warm_model``, a quickstart run's ``sft_model``."""
    from rlvr.config import load_config
    from rlvr.trainer import train

    config = load_config(QUICKSTART, QUIET + OVERRIDES + list(overrides or []) + [
        f"model.path={warm_model}", "sft.enabled=false", f"trainer.output_dir={output_dir}",
        f"trainer.seed={seed}"])
    return _summary(config, train(config, log=lambda *_: None), seed)


def _summary(config: Any, result: Any, seed: int) -> dict[str, Any]:
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
        "staleness_max": max((m.get("async/staleness_max", 0.0) for m in result.history),
                             default=0.0),
        "trained_steps": len(result.history),
    }
