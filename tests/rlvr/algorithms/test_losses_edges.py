"""``rlvr.algorithms.losses`` at its edges: log-ratio clamp, metric boundaries, defaults, detach.

Each test asserts a value the documented formula gives; together they fail on every small
change of the module (``bash dev.sh mutate rlvr/algorithms/losses.py``).
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms.losses import (
    POLICY_LOSSES,
    PolicyLossInputs,
    ppo_clip_loss,
    truncated_is_weights,
    value_loss,
)
from rlvr.errors import ShapeError

T = torch.tensor


def one(x: float) -> torch.Tensor:
    return T([[x]])


def test_vanilla_is_registered():
    assert POLICY_LOSSES["vanilla"].fn is ppo_clip_loss


# ----------------------------------------------------------------------------- policy loss
def test_log_ratio_clamped_at_20_in_ratio_and_ppo_kl():
    # log-ratio 30 -> 20: ppo_kl is -20 (not -30); a negative advantage without the dual clip
    # pays exactly exp(20), and a log-ratio of -30 pays exp(-20)
    loss, metrics = ppo_clip_loss(
        PolicyLossInputs(one(30.0), one(0.0), one(-1.0), one(1.0), dual_clip_c=None)
    )
    assert metrics["ppo_kl"].item() == pytest.approx(-20.0)
    assert loss.item() == pytest.approx(math.exp(20.0), rel=1e-5)
    loss, metrics = ppo_clip_loss(
        PolicyLossInputs(one(-30.0), one(0.0), one(1.0), one(1.0), clip_low=0.0)
    )
    assert metrics["ppo_kl"].item() == pytest.approx(20.0)
    assert loss.item() == pytest.approx(-math.exp(-20.0), rel=1e-5)


@pytest.mark.parametrize("garbage", [float("nan"), float("inf"), 0.0])
def test_masked_inputs_never_reach_the_loss_or_its_gradient(garbage):
    # token 1 is masked: whatever its inputs hold, its gradient is exactly 0 (an inf advantage
    # times a zero upstream gradient would be nan)
    logp = T([[-1.0, 0.3]], requires_grad=True)
    old = T([[-1.5, garbage]])
    adv = T([[2.0, float("inf")]])
    mask = T([[1.0, 0.0]])
    loss, metrics = ppo_clip_loss(PolicyLossInputs(logp, old, adv, mask))
    loss.backward()
    # ratio e^0.5 > 1.2: clipped, -2 * 1.2, gradient 0
    assert loss.item() == pytest.approx(-2.4)
    assert torch.equal(logp.grad, T([[0.0, 0.0]]))
    assert metrics["ppo_kl"].item() == pytest.approx(-0.5)
    assert metrics["pg_clipfrac"].item() == pytest.approx(1.0)


def test_positive_advantages_below_one_never_take_the_dual_clip():
    # A = 0.5 at ratio 1: -0.5, whatever the dual-clip constant
    loss, metrics = ppo_clip_loss(PolicyLossInputs(one(0.0), one(0.0), one(0.5), one(1.0)))
    assert loss.item() == pytest.approx(-0.5)
    assert metrics["pg_clipfrac_lower"].item() == 0.0


def test_dual_clip_counted_only_above_its_bound():
    # A = -1, ratio 2, c = 2: the loss equals the bound, so the dual clip did not engage
    lp = T([[math.log(2.0)]], dtype=torch.float64)
    x = PolicyLossInputs(lp, torch.zeros_like(lp), -torch.ones_like(lp), torch.ones_like(lp),
                         dual_clip_c=2.0)
    loss, metrics = ppo_clip_loss(x)
    assert loss.item() == pytest.approx(2.0)
    assert metrics["pg_clipfrac_lower"].item() == 0.0
    assert metrics["pg_clipfrac"].item() == 0.0


def test_metrics_are_counted_over_valid_tokens_only():
    # token 0: inside the region; token 1: clipped (ratio e^1 > 1.2, A = 1); token 2:
    # dual-clipped (A = -1, ratio e^2 > 3); token 3: masked, would be dual-clipped too
    logp = T([[0.0, 1.0, 2.0, 3.0]])
    adv = T([[1.0, 1.0, -1.0, -1.0]])
    mask = T([[1.0, 1.0, 1.0, 0.0]])
    loss, metrics = ppo_clip_loss(PolicyLossInputs(logp, torch.zeros_like(logp), adv, mask))
    assert loss.item() == pytest.approx((-1.0 - 1.2 + 3.0) / 3)
    assert metrics["pg_clipfrac"].item() == pytest.approx(1 / 3)
    assert metrics["pg_clipfrac_lower"].item() == pytest.approx(1 / 3)
    assert metrics["ppo_kl"].item() == pytest.approx(-1.0)
    assert metrics["valid_tokens"].item() == 3.0
    assert metrics["pg_loss"].item() == pytest.approx(loss.item())


def test_policy_loss_aggregates_with_the_configured_mode():
    logp = T([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    adv = T([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = T([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    x = PolicyLossInputs(logp, logp, adv, mask, agg="seq-mean-token-sum")
    loss, _ = ppo_clip_loss(x)
    assert loss.item() == pytest.approx((-3.0 - 4.0) / 2)


def test_is_weights_are_detached_and_metrics_carry_no_grad():
    logp = T([[-1.0, -2.0]], requires_grad=True)
    w = T([[0.5, 2.0]], requires_grad=True)
    loss, metrics = ppo_clip_loss(
        PolicyLossInputs(logp, logp.detach(), T([[1.0, 1.0]]), torch.ones(1, 2), is_weights=w)
    )
    loss.backward()
    assert w.grad is None
    assert torch.allclose(logp.grad, T([[-0.25, -1.0]]))  # -A * w / 2 tokens
    assert not any(v.requires_grad for v in metrics.values())


def test_is_weights_on_masked_tokens_are_ignored():
    mask = T([[1.0, 0.0]])
    w = T([[3.0, float("nan")]])
    logp = T([[0.0, 0.0]], requires_grad=True)
    loss, _ = ppo_clip_loss(
        PolicyLossInputs(logp, T([[0.0, 0.0]]), T([[1.0, 1.0]]), mask, is_weights=w)
    )
    loss.backward()
    assert loss.item() == pytest.approx(-3.0)
    assert torch.equal(logp.grad, T([[-3.0, 0.0]]))


# ----------------------------------------------------------------------------- IS weights
def test_truncated_is_weights_default_cap_and_clamp():
    old = T([[0.0, 0.0, 0.0]])
    rollout = T([[-5.0, 30.0, -1.0]])
    w = truncated_is_weights(old, rollout, T([[1.0, 1.0, 0.0]]))
    assert w[0, 0].item() == 2.0  # the default cap
    assert w[0, 1].item() == pytest.approx(math.exp(-20.0), rel=1e-5)  # log-ratio -30 -> -20
    assert w[0, 2].item() == 0.0
    # any positive cap, also one below 1
    assert truncated_is_weights(old, rollout, T([[1.0, 1.0, 0.0]]), cap=0.5)[0, 0].item() == 0.5
    with pytest.raises(ShapeError, match=r"mask has shape \(1, 2\); expected \(1, 3\)"):
        truncated_is_weights(old, rollout, T([[1.0, 1.0]]))


# ----------------------------------------------------------------------------- value loss
def test_value_loss_default_clip_and_metrics():
    # v = 1, old 0, return 2: the default clip 0.5 gives max(1, 2.25) / 2
    values = one(1.0).requires_grad_()
    loss, metrics = value_loss(values, one(0.0), one(2.0), one(1.0))
    assert loss.item() == pytest.approx(1.125)
    assert metrics["vf_clipfrac"].item() == 1.0
    assert metrics["valid_tokens"].item() == 1.0
    assert metrics["vf_loss"].item() == pytest.approx(1.125)
    assert not any(v.requires_grad for v in metrics.values())


def test_value_loss_inside_the_clip_range_is_unclipped():
    # |v - old| <= clip: the clipped value is v itself, the errors tie: not counted as clipped
    values = T([[0.2, -0.3, 5.0]], requires_grad=True)
    old = T([[0.0, 0.0, float("nan")]])
    returns = T([[1.0, 1.0, float("inf")]])
    mask = T([[1.0, 1.0, 0.0]])
    loss, metrics = value_loss(values, old, returns, mask, clip=0.5)
    loss.backward()
    assert loss.item() == pytest.approx(0.5 * (0.8**2 + 1.3**2) / 2)
    assert metrics["vf_clipfrac"].item() == 0.0
    assert metrics["valid_tokens"].item() == 2.0
    # d/dv of 0.5 * mean((v - R)^2) = (v - R) / 2 tokens
    assert torch.allclose(values.grad, T([[-0.4, -0.65, 0.0]]))


def test_value_loss_clipfrac_counts_valid_tokens_only():
    # token 0 clipped (v = 1 beyond old + 0.5, return 2), token 1 unclipped, token 2 masked
    loss, metrics = value_loss(T([[1.0, 0.0, 0.0]]), T([[0.0, 0.0, 0.0]]), T([[2.0, 1.0, 0.0]]),
                               T([[1.0, 1.0, 0.0]]), clip=0.5)
    assert metrics["vf_clipfrac"].item() == pytest.approx(0.5)
    assert loss.item() == pytest.approx(0.5 * (2.25 + 1.0) / 2)
    with pytest.raises(ShapeError, match=r"returns has shape \(1, 2\); expected \(1, 3\)"):
        value_loss(T([[1.0, 0.0, 0.0]]), T([[0.0, 0.0, 0.0]]), T([[2.0, 1.0]]),
                   T([[1.0, 1.0, 0.0]]))


def test_value_loss_clips_on_both_sides():
    # v far below old: the clipped value old - clip is farther from the return
    loss, metrics = value_loss(one(-1.0), one(0.0), one(-3.0), one(1.0), clip=0.5)
    assert loss.item() == pytest.approx(0.5 * 2.5**2)
    assert metrics["vf_clipfrac"].item() == 1.0
    loss, _ = value_loss(one(1.0), one(0.0), one(3.0), one(1.0), clip=0.25)
    assert loss.item() == pytest.approx(0.5 * 2.75**2)
