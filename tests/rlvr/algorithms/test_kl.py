"""KL estimators, the KL loss term and the in-reward penalty (``rlvr.algorithms.kl``)."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms.kl import (
    KL_KINDS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_in_reward,
    build_controller,
    kl_penalty,
)
from rlvr.errors import ConfigError, UnknownNameError

T = torch.tensor
ATOL = 1e-5


def one(x: float) -> torch.Tensor:
    return T([[x]])


def test_kl_estimators_known_values():
    lp, ref = one(math.log(2.0)), one(0.0)
    d = math.log(2.0)
    expected = {"k1": d, "abs": d, "k2": 0.5 * d * d, "k3": 0.5 + d - 1.0}
    for kind, canonical in KL_KINDS.items():
        assert kl_penalty(lp, ref, kind).item() == pytest.approx(expected[canonical], abs=ATOL), (
            kind
        )
    assert kl_penalty(one(-1.0), one(0.0), "abs").item() == pytest.approx(1.0)
    # k3 clamps: u = clamp(ref - logp, -20, 20) and the value to [-10, 10]
    assert kl_penalty(one(-30.0), one(0.0), "k3").item() == 10.0
    assert kl_penalty(one(0.0), one(0.0), "low_var_kl").item() == 0.0


def test_kl_straight_through_gradient():
    lp = T([[0.3, -0.7]], requires_grad=True)
    ref = T([[0.0, 0.0]])
    out = kl_penalty(lp, ref, "k3+")
    assert torch.allclose(out, kl_penalty(lp, ref, "k3"))
    out.sum().backward()
    assert torch.allclose(lp.grad, lp.detach() - ref)  # gradient of 0.5 * d^2


def test_kl_unknown_kind_lists_allowed():
    with pytest.raises(
        UnknownNameError, match=r"unknown KL estimator 'k4'; known: .*abs.*k3\+.*low_var_kl"
    ):
        kl_penalty(one(0.0), one(0.0), "k4")


def test_apply_kl_in_reward_fixed():
    scores = T([[0.0, 1.0], [0.0, 0.0]])
    lp = T([[0.5, 0.5], [0.2, 9.0]])
    ref = torch.zeros(2, 2)
    mask = T([[1.0, 1.0], [1.0, 0.0]])
    ctl = FixedKLController(0.1)
    rewards, metrics = apply_kl_in_reward(scores, lp, ref, mask, ctl, "k1")
    assert torch.allclose(rewards, T([[-0.05, 0.95], [-0.02, 0.0]]))
    assert metrics["reward_kl_penalty"] == pytest.approx((0.5 + 0.2) / 2)
    assert metrics["reward_kl_penalty_coeff"] == 0.1 and ctl.value == 0.1


def test_adaptive_kl_controller_update():
    ctl = AdaptiveKLController(init_coef=0.1, target_kl=1.0, horizon=10)
    _, metrics = apply_kl_in_reward(
        torch.zeros(2, 1), T([[2.0], [2.0]]), torch.zeros(2, 1), torch.ones(2, 1), ctl
    )
    assert metrics["reward_kl_penalty_coeff"] == 0.1  # the coefficient used, before the update
    assert ctl.value == pytest.approx(0.1 * (1 + 0.2 * 2 / 10))  # error clipped to +0.2
    ctl.update(current_kl=0.9, n_steps=5)
    assert ctl.value == pytest.approx(0.104 * (1 - 0.1 * 5 / 10))
    state = ctl.state_dict()
    fresh = AdaptiveKLController(0.5, 1.0, 10)
    fresh.load_state_dict(state)
    assert fresh.value == ctl.value
    with pytest.raises(ConfigError, match="target_kl > 0"):
        AdaptiveKLController(0.1, 0.0, 10)


def test_build_controller_by_name():
    fixed = build_controller("fixed", 0.2)
    assert isinstance(fixed, FixedKLController) and fixed.value == 0.2
    adaptive = build_controller("adaptive", 0.1, target_kl=1.0, horizon=10)
    assert isinstance(adaptive, AdaptiveKLController)
    adaptive.update(current_kl=2.0, n_steps=2)
    assert adaptive.value == pytest.approx(0.1 * (1 + 0.2 * 2 / 10))
    with pytest.raises(UnknownNameError, match=r"unknown KL controller 'adaptiv'.*'adaptive'"):
        build_controller("adaptiv", 0.1)
    with pytest.raises(ConfigError, match="coef must be >= 0"):
        build_controller("fixed", -1.0)
