"""Steps without reward variance teach nothing: the run says so after a few, with the causes."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_helpers import QUIET, SMALL_MODEL

from rlvr.config import load_config
from rlvr.trainer import train
from rlvr.training.reward_watch import ZERO_VARIANCE_STEPS, RewardWatch

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def test_the_warning_comes_once_after_steps_in_a_row():
    watch = RewardWatch(steps=3)
    flat = {"reward/mean": 0.0, "reward/std": 0.0}
    assert [watch.observe(flat) for _ in range(2)] == [None, None]
    assert watch.observe({"reward/mean": 0.5, "reward/std": 0.5}) is None  # variance: reset
    lines = [watch.observe(flat) for _ in range(5)]
    assert lines[:2] == [None, None] and lines[3:] == [None, None]
    assert "last 3 steps had no reward variance" in (lines[2] or "")
    assert "sft.enabled=false" in (lines[2] or "")
    same = RewardWatch(steps=1).observe({"reward/mean": 1.0, "reward/std": 0.0})
    assert same is not None and "every episode gets the same reward" in same


@pytest.mark.slow
def test_a_run_at_reward_0_without_a_warm_up_is_told_why(tmp_path):
    """The random tiny model without its warm-up never answers: every step's reward is 0."""
    lines: list[str] = []
    config = load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}",
        f"trainer.steps={ZERO_VARIANCE_STEPS}", "trainer.threads=1",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "eval.tasks=2", "eval.every=0",
        "rollout.runner.max_tokens_per_turn=4", "rollout.runner.max_response_tokens=4"])
    train(config, log=lines.append)
    warnings = [line for line in lines if "no reward variance" in line]
    assert len(warnings) == 1
    assert f"the last {ZERO_VARIANCE_STEPS} steps" in warnings[0]
    assert "every episode's reward was 0" in warnings[0]
