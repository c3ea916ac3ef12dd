"""A held-out evaluation whose every episode errored reports n/a and why, never 0.0%."""

from __future__ import annotations

from pathlib import Path

import gymnasium
from trainer_helpers import QUIET, SMALL_MODEL

from rlvr.config import load_config
from rlvr.envs.math_env import MathEnv
from rlvr.trainer import summary, train

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


class _HeldOutBroken(MathEnv):
    """Trains fine; its test split's verifier is gone."""

    def reset(self, *, seed=None, options=None):
        if self.split == "test":
            raise RuntimeError("the grader of the test split is gone")
        return super().reset(seed=seed, options=options)


def test_every_held_out_episode_errored_says_n_a_and_why(tmp_path):
    gymnasium.register("rlvrtest/HeldOutBroken-v0", entry_point=_HeldOutBroken)
    lines: list[str] = []
    try:
        config = load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
            "env.id=rlvrtest/HeldOutBroken-v0", "sft.enabled=false",
            f"trainer.output_dir={tmp_path}", "trainer.steps=1", "trainer.threads=1",
            "rollout.prompts_per_step=2", "rollout.group_size=2", "eval.tasks=2",
            "eval.every=0", "rollout.runner.max_tokens_per_turn=4",
            "rollout.runner.max_response_tokens=4"])
        result = train(config, log=lines.append)
    finally:
        gymnasium.registry.pop("rlvrtest/HeldOutBroken-v0")
    assert result.warmup_accuracy is None and result.final_accuracy is None
    before = next(line for line in lines if "held-out accuracy before RL" in line)
    assert "n/a (every one of the 2 held-out episodes ended in an error or a timeout" in before
    text = summary(result)
    assert "held-out accuracy after RL: n/a: every one of the 2 held-out episodes" in text
    assert "the grader of the test split is gone" in text
    assert "0.0%" not in text
