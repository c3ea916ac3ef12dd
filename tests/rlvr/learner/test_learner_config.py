from __future__ import annotations

import pytest

from rlvr.errors import ConfigError
from rlvr.learner import LearnerConfig, OptimConfig
from rlvr.learner.optim import WarmupSchedule


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, r"optim\.lr must be > 0\.0; got 0\.0"),
        ({"lr": float("nan")}, r"optim\.lr must be a finite number"),
        ({"weight_decay": -1.0}, r"optim\.weight_decay must be >= 0\.0"),
        ({"betas": (0.9, 1.0)}, r"optim\.betas must be two numbers in \[0, 1\)"),
        ({"warmup_steps": -1}, r"optim\.warmup_steps must be an integer >= 0"),
        ({"schedule": "step"}, r"optim\.schedule must be one of 'constant', 'cosine', 'linear'"),
        ({"schedule": "cosine"}, r"optim\.total_steps must be set .* 'cosine'"),
        ({"min_lr_ratio": 1.5}, r"optim\.min_lr_ratio must be in \[0, 1\]"),
        ({"grad_clip": -0.1}, r"optim\.grad_clip must be >= 0\.0"),
    ],
)
def test_optim_config_errors_name_the_field(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        OptimConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"micro_batch_size": 0}, r"learner\.micro_batch_size must be an integer >= 1; got 0"),
        ({"mini_batch_size": 0}, r"learner\.mini_batch_size must be an integer >= 1"),
        ({"epochs": 0}, r"learner\.epochs must be an integer >= 1"),
        ({"mixed_precision": "fp16"},
         r"learner\.mixed_precision must be one of 'auto', 'bf16', 'fp32'"),
        ({"clip_low": 1.0}, r"learner\.clip_low must be in \(0, 1\)"),
        ({"clip_high": 0.0}, r"learner\.clip_high must be > 0\.0"),
        ({"dual_clip": 1.0}, r"learner\.dual_clip must be > 1\.0"),
        ({"loss_agg": "mean"},
         r"learner\.loss_agg must be one of 'token-mean', .*'seq-mean-token-sum-norm'"),
        ({"entropy_coef": -0.1}, r"learner\.entropy_coef must be >= 0\.0"),
        ({"kl_loss_coef": -1.0}, r"learner\.kl_loss_coef must be >= 0\.0"),
        ({"kl_loss_estimator": "k4"}, r"learner\.kl_loss_estimator must be one of .*'low_var_kl'"),
        ({"tis_cap": 0.0}, r"learner\.tis_cap must be > 0\.0"),
        ({"value_clip": 0.0}, r"learner\.value_clip must be > 0\.0"),
        ({"activation_checkpointing": "yes"},
         r"learner\.activation_checkpointing must be true or false"),
        ({"optim": {"lr": 1.0}}, r"learner\.optim must be an OptimConfig"),
    ],
)
def test_learner_config_errors_name_the_field(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        LearnerConfig(**kwargs)


def test_config_errors_are_value_errors_and_defaults_are_valid():
    LearnerConfig(kl_loss_estimator="k3+", dual_clip=None, tis_cap=2.0)
    with pytest.raises(ValueError):
        LearnerConfig(epochs=-1)


def test_warmup_then_cosine_schedule():
    s = WarmupSchedule(OptimConfig(warmup_steps=3, schedule="cosine", total_steps=13,
                                   min_lr_ratio=0.1))
    assert [s(i) for i in range(3)] == [0.25, 0.5, 0.75]
    assert s(3) == pytest.approx(1.0)
    assert s(8) == pytest.approx(0.1 + 0.9 * 0.5)
    assert s(13) == pytest.approx(0.1) and s(100) == pytest.approx(0.1)
    lin = WarmupSchedule(OptimConfig(schedule="linear", total_steps=4))
    assert [lin(i) for i in range(5)] == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    assert WarmupSchedule(OptimConfig())(1000) == 1.0
