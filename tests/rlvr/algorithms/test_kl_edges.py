"""``rlvr.algorithms.kl`` at its edges: the controller off ``target_kl=1``, clamps, defaults, masks.

Each test asserts a value the documented formula gives; together they fail on every small
change of the module (``bash dev.sh mutate rlvr/algorithms/kl.py``).
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms.kl import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_in_reward,
    build_controller,
    kl_loss,
    kl_penalty,
)
from rlvr.errors import ConfigError, ShapeError

T = torch.tensor


@pytest.mark.parametrize(
    ("current_kl", "error"),
    [
        (0.55, 0.1),  # e = 0.55 / 0.5 - 1, inside the clip
        (0.45, -0.1),
        (1.5, 0.2),  # clipped to +0.2
        (0.0, -0.2),  # clipped to -0.2
    ],
)
def test_adaptive_controller_divides_by_its_target(current_kl, error):
    ctl = AdaptiveKLController(init_coef=0.2, target_kl=0.5, horizon=40)
    ctl.update(current_kl, n_steps=8)
    assert ctl.value == pytest.approx(0.2 * (1.0 + error * 8 / 40))


def test_build_controller_defaults():
    ctl = build_controller("adaptive", 0.3)
    assert isinstance(ctl, AdaptiveKLController)
    assert (ctl.value, ctl.target, ctl.horizon) == (0.3, 0.1, 10_000)
    ctl.update(current_kl=0.11, n_steps=1000)  # e = 0.1
    assert ctl.value == pytest.approx(0.3 * (1.0 + 0.1 * 1000 / 10_000))


def test_controllers_accept_a_zero_coefficient_and_reject_bad_ranges():
    fixed = FixedKLController(0.0)
    fixed.update(current_kl=5.0, n_steps=3)
    assert fixed.value == 0.0
    assert AdaptiveKLController(0.0, 0.1, 1).value == 0.0
    for bad in [(-0.1, 0.1, 1), (0.1, -1.0, 1), (0.1, 0.1, 0)]:
        with pytest.raises(ConfigError, match="init_coef must be >= 0, target_kl > 0 and horizon"):
            AdaptiveKLController(*bad)


def test_k3_of_a_zero_probability_token_is_the_clamp_not_nan():
    # logp = -inf: u = clamp(inf, -20, 20) = 20, exp(20) - 21 clamps to 10 (unclamped: nan)
    assert kl_penalty(T([float("-inf")]), T([0.0]), "k3").item() == 10.0
    # ref = -inf: u = -20: exp(-20) + 19, clamped to 10
    assert kl_penalty(T([0.0]), T([float("-inf")]), "k3").item() == 10.0
    # just inside the value clamp: d = -2.5 -> e^2.5 - 3.5 = 8.68
    assert kl_penalty(T([-2.5]), T([0.0]), "k3").item() == pytest.approx(math.exp(2.5) - 3.5)


def test_kl_loss_defaults_masks_and_detached_metric():
    d = math.log(2.0)
    lp = T([[d + 0.25, float("nan")], [-0.5, 0.0]], requires_grad=True)
    ref = T([[0.25, 0.0], [-0.5, 0.0]])  # d = logp - ref: log 2 and 0
    mask = T([[1.0, 0.0], [1.0, 0.0]])
    loss, metrics = kl_loss(lp, ref, mask)  # low_var_kl (k3), token-mean
    loss.backward()
    assert loss.item() == pytest.approx((0.5 + d - 1.0) / 2)
    assert metrics["kl_loss"].item() == pytest.approx(loss.item())
    assert not metrics["kl_loss"].requires_grad
    # d k3 / d logp = 1 - exp(-d) = 0.5, over 2 tokens; masked tokens get exactly 0
    assert torch.equal(lp.grad[:, 1], T([0.0, 0.0]))
    assert lp.grad[0, 0].item() == pytest.approx(0.25)


def test_shapes_are_checked():
    with pytest.raises(ShapeError, match=r"ref_logprobs has shape \(1, 3\); expected \(1, 2\)"):
        kl_penalty(torch.zeros(1, 2), torch.zeros(1, 3), "k1")
    with pytest.raises(ShapeError, match=r"mask has shape \(1, 3\); expected \(1, 2\)"):
        apply_kl_in_reward(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2),
                           torch.zeros(1, 3), FixedKLController(0.1))


def test_kl_in_reward_default_k1_and_rows_without_tokens():
    scores = T([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    ref = T([[0.5, 0.5], [0.0, 0.0], [-1.0, -1.0]])
    lp = T([[-0.5, -0.1], [3.0, 3.0], [0.2, 0.4]]) + ref
    mask = T([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])  # row 1: an env-error row
    ctl = AdaptiveKLController(init_coef=0.5, target_kl=0.1, horizon=30)
    rewards, metrics = apply_kl_in_reward(scores, lp, ref, mask, ctl)
    # k1 (the default) is d itself; rewards = scores - 0.5 * d on mask-1 tokens
    torch.testing.assert_close(rewards, T([[1.25, 0.05], [0.0, 0.0], [-0.1, 0.0]]))
    # current_kl: mean over the two rows with tokens of their masked means (-0.3, 0.2)
    assert metrics["reward_kl_penalty"] == pytest.approx(-0.05)
    assert metrics["reward_kl_penalty_coeff"] == 0.5
    # e = -0.05 / 0.1 - 1 -> -0.2; n_steps = 3 rows
    assert ctl.value == pytest.approx(0.5 * (1.0 - 0.2 * 3 / 30))


@pytest.mark.parametrize("kind", ["k2", "abs"])
def test_kl_loss_gradient_is_zero_on_masked_tokens_holding_nan(kind):
    lp = T([[0.5, float("nan")]], requires_grad=True)
    loss, _ = kl_loss(lp, T([[0.0, 0.0]]), T([[1.0, 0.0]]), kind=kind)
    loss.backward()
    assert loss.item() == pytest.approx(0.125 if kind == "k2" else 0.5)
    assert lp.grad.tolist() == [[0.5 if kind == "k2" else 1.0, 0.0]]
