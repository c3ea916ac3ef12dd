"""When a run misbehaves (docs/faults.md): hung env calls, broken envs, used run folders,
changed resumes and late validation each end in a clear outcome, never a hang or a silent one."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest
from trainer_helpers import QUIET, SMALL_MODEL  # noqa: E402 (shared trainer-test overrides)

from envs.math_env import MathEnv
from rlvr.config import load_config
from rlvr.errors import RunStoppedError
from rlvr.metrics import read_jsonl
from rlvr.trainer import train

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
REPO = CONFIGS.parent


def test_heldout_evaluation_keeps_the_runs_env_step_timeout(tiny_model_path):
    """The held-out evaluation used to run with the runner's default 60 s per env call."""
    from transformers import AutoTokenizer

    from rlvr.training.heldout import heldout_evaluator

    config = load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "rollout.runner.env_step_timeout_s=1.5", "rollout.runner.env_workers=3"])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    ev = heldout_evaluator(config, None, tokenizer, suite=None, tasks=2, every=0)
    try:
        assert ev.runner.config.env_step_timeout_s == 1.5
        assert ev.runner.config.env_workers == 3
    finally:
        ev.close()


def test_rlvr_eval_takes_an_env_step_timeout():
    from rlvr.evaluate import SuiteEvalConfig

    assert SuiteEvalConfig(suite="x", env_step_timeout_s=2.0).runner_config() \
        .env_step_timeout_s == 2.0


def _silent(*_):
    pass


def _run_config(tmp_path, *extra):
    return load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}", "trainer.steps=3",
        "trainer.threads=1", "rollout.prompts_per_step=2", "rollout.group_size=2",
        "eval.tasks=2", "eval.every=0", *extra])


class _BrokenReset(MathEnv):
    def reset(self, *, seed=None, options=None):
        raise RuntimeError("the task database is gone")


def test_a_broken_env_stops_the_run_naming_the_env_and_its_traceback(tmp_path):
    """Every episode errors: the run used to exit 0, export a model and print "+0.0 points"."""
    gymnasium.register("rlvrtest/BrokenReset-v0", entry_point=_BrokenReset)
    try:
        config = _run_config(tmp_path, "env.id=rlvrtest/BrokenReset-v0",
                             "trainer.export_at_end=true")
        with pytest.raises(RunStoppedError) as err:
            train(config, log=_silent)
    finally:
        gymnasium.registry.pop("rlvrtest/BrokenReset-v0")
    message = str(err.value)
    assert "'rlvrtest/BrokenReset-v0' produced no valid episode in step 1" in message
    assert "RuntimeError: the task database is gone" in message
    assert "Traceback (most recent call last)" in message and "in reset" in message
    assert not (tmp_path / "export").exists()
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl") if r["step"] > 0] == []


def test_max_failed_steps_allows_failed_steps_in_a_row_before_stopping(tmp_path):
    gymnasium.register("rlvrtest/BrokenReset-v0", entry_point=_BrokenReset)
    try:
        config = _run_config(tmp_path, "env.id=rlvrtest/BrokenReset-v0",
                             "trainer.max_failed_steps=2")
        with pytest.raises(RunStoppedError, match="2 steps in a row"):
            train(config, log=_silent)
    finally:
        gymnasium.registry.pop("rlvrtest/BrokenReset-v0")
