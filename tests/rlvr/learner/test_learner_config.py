from __future__ import annotations

import pytest
import torch

from rlvr.errors import ConfigError
from rlvr.learner import ActorConfig, CriticConfig, LearnerConfig, OptimConfig
from rlvr.learner.optim import WarmupSchedule


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, r"^lr must be > 0; got 0\.0"),
        ({"lr": float("nan")}, r"^lr must be a finite number"),
        ({"weight_decay": -1.0}, r"^weight_decay must be >= 0"),
        ({"betas": (0.9, 1.0)}, r"^betas must be two numbers in \[0, 1\)"),
        ({"warmup_steps": -1}, r"^warmup_steps must be >= 0; got -1"),
        ({"warmup_steps": 1.5}, r"^warmup_steps must be an integer; got 1\.5"),
        ({"schedule": "step"},
         r"^schedule: unknown value 'step'; allowed: constant, cosine, linear"),
        ({"schedule": "cosine"}, r"^total_steps must be set .* 'cosine'"),
        ({"min_lr_ratio": 1.5}, r"^min_lr_ratio must be in \[0, 1\]"),
        ({"grad_clip": -0.1}, r"^grad_clip must be >= 0"),
    ],
)
def test_optim_config_errors_name_the_field(kwargs, match):
    with pytest.raises(ConfigError, match=match) as err:
        OptimConfig(**kwargs)
    assert err.value.key == match.lstrip("^").split(" ")[0].rstrip(":")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"micro_batch_size": 0}, r"^micro_batch_size must be >= 1; got 0"),
        ({"mini_batch_size": 0}, r"^mini_batch_size must be >= 1 or null"),
        ({"epochs": 0}, r"^epochs must be >= 1"),
        ({"mixed_precision": "fp16"},
         r"^mixed_precision: unknown value 'fp16'; allowed: auto, bf16, fp32"),
        ({"clip_low": 1.0}, r"^clip_low must be in \(0, 1\)"),
        ({"clip_high": 0.0}, r"^clip_high must be > 0"),
        ({"dual_clip": 1.0}, r"^dual_clip must be > 1 or null"),
        ({"loss_agg": "mean"},
         r"^loss_agg: unknown value 'mean'; allowed: .*seq-mean-token-sum-norm"),
        ({"entropy_coef": -0.1}, r"^entropy_coef must be >= 0"),
        ({"kl_loss_coef": -1.0}, r"^kl_loss_coef must be >= 0"),
        ({"kl_loss_estimator": "k4"},
         r"^kl_loss_estimator: unknown value 'k4'; allowed: .*low_var_kl"),
        ({"tis_cap": 0.0}, r"^tis_cap must be > 0 or null"),
        ({"activation_checkpointing": "yes"},
         r"^activation_checkpointing must be true or false"),
        ({"optim": {"lr": 1.0}}, r"^optim must be of type OptimConfig"),
    ],
)
def test_actor_config_errors_name_the_field(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ActorConfig(**kwargs)


def test_each_role_takes_only_its_own_fields():
    with pytest.raises(ConfigError, match=r"^value_clip must be > 0"):
        CriticConfig(value_clip=0.0)
    with pytest.raises(TypeError, match="clip_low"):
        CriticConfig(clip_low=0.2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="value_clip"):
        ActorConfig(value_clip=0.5)  # type: ignore[call-arg]
    assert CriticConfig().optim.lr == 1e-5 and ActorConfig().optim.lr == 1e-6
    assert isinstance(ActorConfig(), LearnerConfig) and isinstance(CriticConfig(), LearnerConfig)


def test_config_errors_are_value_errors_and_defaults_are_valid():
    ActorConfig(kl_loss_estimator="k3+", dual_clip=None, tis_cap=2.0)
    with pytest.raises(ValueError):
        ActorConfig(epochs=-1)


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


def test_adamw_is_fused_on_plain_tensors_and_steps_as_the_multi_tensor_kernel_does():
    """Parameters on one device: the fused kernel, whose steps match foreach's to rounding;
    anything else (here meta tensors, standing in for a device torch has no fused AdamW on)
    keeps the multi-tensor kernel."""
    from rlvr.learner.optim import adamw_kernel, build_optimizer

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in ((7, 5), (5,), (3, 7))]
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    assert adamw_kernel(params) == {"fused": True}
    assert adamw_kernel([torch.nn.Parameter(torch.empty(3, device="meta"))]) == {"foreach": True}
    fused, _ = build_optimizer(params, OptimConfig(lr=1e-2, weight_decay=0.1))
    assert fused.defaults["fused"] is True
    looped = torch.optim.AdamW(twins, lr=1e-2, weight_decay=0.1, foreach=True)
    for _ in range(5):
        grads = [torch.randn_like(p) for p in params]
        for ps, opt in ((params, fused), (twins, looped)):
            for p, g in zip(ps, grads, strict=True):
                p.grad = g.clone()
            opt.step()
    for a, b in zip(params, twins, strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
