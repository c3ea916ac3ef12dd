"""When a run misbehaves (docs/faults.md): hung env calls, broken envs, used run folders,
changed resumes and late validation each end in a clear outcome, never a hang or a silent one."""

from __future__ import annotations

from pathlib import Path

from trainer_helpers import QUIET, SMALL_MODEL  # noqa: E402 (shared trainer-test overrides)

from rlvr.config import load_config

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
