"""GSPO and CISPO: known answers from their papers' definitions and from verl 0.9.1.

The ``VERL`` numbers were produced by running verl 0.9.1's ``compute_policy_loss_gspo`` and
``compute_policy_loss_cispo`` (``verl/trainer/ppo/core_algos.py``, one rank, no rollout IS
weights) on the tensors below and printing the loss, ``log_prob.grad`` and the metrics.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from strategies import masks

from rlvr.algorithms.losses import (
    POLICY_LOSSES,
    PolicyLossInputs,
    cispo_loss,
    gspo_loss,
    ppo_clip_loss,
)
from rlvr.errors import ShapeError

T = torch.tensor

LOGP = T([[-1.0, -2.0, -0.3], [-0.5, -1.5, -2.5], [-0.7, -0.1, -3.0]])
OLD = T([[-1.3, -1.6, -0.3], [-0.2, -1.5, -2.0], [-0.9, -0.4, -1.0]])
ADV = T([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0], [0.5, 0.5, 0.5]])
MASK = T([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])

#: (loss, agg, clip_low, clip_high) -> (loss, d loss / d logprobs, pg_clipfrac), from verl 0.9.1.
VERL = {
    ("gspo", "token-mean", 0.2, 0.2): (
        -0.009802719, [[-0.1612027] * 3, [0.2869027, 0.2869027, 0.0], [0.0, 0.0, 0.0]], 1 / 6),
    ("gspo", "token-mean", 0.2, 0.28): (
        -0.01158628, [[-0.1612027] * 3, [0.2869027, 0.2869027, 0.0], [-0.1017836, 0.0, 0.0]],
        0.0),
    ("gspo", "seq-mean-token-mean", 0.2, 0.2): (
        0.05139996, [[-0.1074685] * 3, [0.2869027, 0.2869027, 0.0], [0.0, 0.0, 0.0]], 1 / 6),
    ("gspo", "seq-mean-token-mean", 0.05, 0.05): (
        0.135928, [[-0.1074685] * 3, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], 0.5),
    ("gspo", "seq-mean-token-sum", 0.2, 0.28): (
        -0.02317256, [[-0.3224054] * 3, [0.5738053, 0.5738053, 0.0], [-0.2035671, 0.0, 0.0]],
        0.0),
    ("cispo", "token-mean", 0.2, 0.2): (
        -0.04666663, [[-0.2, -0.1333333, -0.1666667], [0.2666667, 0.3333333, 0.0],
                      [-0.1, 0.0, 0.0]], 2 / 3),
    ("cispo", "token-mean", 0.2, 0.28): (
        -0.03208482, [[-0.2133333, -0.1333333, -0.1666667], [0.2666667, 0.3333333, 0.0],
                      [-0.1017836, 0.0, 0.0]], 0.5),
    ("cispo", "seq-mean-token-mean", 0.05, 0.05): (
        -0.1747223, [[-0.1166667, -0.1055556, -0.1111111], [0.3166667, 0.3333333, 0.0],
                     [-0.175, 0.0, 0.0]], 2 / 3),
    ("cispo", "seq-mean-token-sum", 0.2, 0.28): (
        -0.06416965, [[-0.4266667, -0.2666667, -0.3333333], [0.5333334, 0.6666667, 0.0],
                      [-0.2035671, 0.0, 0.0]], 0.5),
}
VERL_PPO_KL = 0.03333334  # masked_mean(old - new), the same for both


@pytest.mark.parametrize(("name", "agg", "low", "high"), sorted(VERL))
def test_matches_verl(name, agg, low, high):
    want_loss, want_grad, want_clipfrac = VERL[(name, agg, low, high)]
    logp = LOGP.clone().requires_grad_()
    # masked tokens hold garbage: it must reach neither the loss nor the gradient
    old = torch.where(MASK > 0, OLD, torch.full_like(OLD, float("nan")))
    loss, metrics = POLICY_LOSSES[name].fn(PolicyLossInputs(
        logp, old, ADV, MASK, clip_low=low, clip_high=high, agg=agg))
    loss.backward()
    assert loss.item() == pytest.approx(want_loss, abs=1e-6)
    torch.testing.assert_close(logp.grad, T(want_grad), atol=1e-6, rtol=0)
    assert metrics["pg_clipfrac"].item() == pytest.approx(want_clipfrac, abs=1e-6)
    assert metrics["ppo_kl"].item() == pytest.approx(VERL_PPO_KL, abs=1e-6)
    assert metrics["valid_tokens"].item() == 6.0


def test_registered_with_their_papers():
    assert POLICY_LOSSES["gspo"].fn is gspo_loss
    assert POLICY_LOSSES["gspo"].paper == "https://arxiv.org/abs/2507.18071"
    assert POLICY_LOSSES["cispo"].fn is cispo_loss
    assert POLICY_LOSSES["cispo"].paper == "https://arxiv.org/abs/2506.13585"


# ----------------------------------------------------------------------------- GSPO, the paper
def test_gspo_is_the_papers_sequence_objective():
    """GSPO eq. (5)-(7): J = mean_i min(s_i A_i, clip(s_i) A_i), s_i = (pi/pi_old)^(1/|y_i|).

    With ``seq-mean-token-mean`` and one advantage per sequence, the loss is exactly -J, and its
    gradient is the gradient of -J computed through the full sequence ratio (no stop-gradient
    trick): sg(s_i) * exp(logp - sg(logp)) has the value and the gradient of s_i.
    """
    logp = LOGP.clone().requires_grad_()
    loss, _ = gspo_loss(PolicyLossInputs(logp, OLD, ADV, MASK, agg="seq-mean-token-mean"))
    loss.backward()
    ref_logp = LOGP.clone().requires_grad_()
    lengths = MASK.sum(-1)
    s = torch.exp(((ref_logp - OLD) * MASK).sum(-1) / lengths)
    a = ADV[:, 0]
    objective = torch.minimum(s * a, s.clamp(0.8, 1.2) * a).mean()
    (-objective).backward()
    assert loss.item() == pytest.approx(-objective.item(), abs=1e-6)
    torch.testing.assert_close(logp.grad, ref_logp.grad, atol=1e-6, rtol=0)


def test_gspo_clips_whole_sequences_where_ppo_clips_tokens():
    # row 0: token ratios exp(0.3), exp(-0.4), 1; the sequence ratio exp(-0.1/3) is inside
    # [0.8, 1.2]: GSPO keeps every token's gradient, PPO drops token 0's (ratio 1.35 > 1.2).
    logp, ppo_logp = (LOGP[:1].clone().requires_grad_() for _ in range(2))
    gspo_loss(PolicyLossInputs(logp, OLD[:1], ADV[:1], MASK[:1]))[0].backward()
    ppo_clip_loss(PolicyLossInputs(ppo_logp, OLD[:1], ADV[:1], MASK[:1]))[0].backward()
    assert (logp.grad != 0).all()
    assert ppo_logp.grad[0, 0].item() == 0.0


def test_gspo_equals_on_policy_policy_gradient():
    """At ratio 1 (old == new) GSPO's gradient is -A * grad(logp) aggregated, as PPO's."""
    logp, ppo_logp = (LOGP.clone().requires_grad_() for _ in range(2))
    for fn, lp in ((gspo_loss, logp), (ppo_clip_loss, ppo_logp)):
        fn(PolicyLossInputs(lp, LOGP, ADV, MASK, agg="token-mean"))[0].backward()
    torch.testing.assert_close(logp.grad, ppo_logp.grad)


# ----------------------------------------------------------------------------- CISPO, the paper
def test_cispo_is_the_papers_objective():
    """MiniMax-M1 eq. (4)-(5): J = sum_t sg(r_hat) A log pi / sum |o_i|, r_hat = clip(r)."""
    logp = LOGP.clone().requires_grad_()
    loss, metrics = cispo_loss(PolicyLossInputs(logp, OLD, ADV, MASK, clip_low=0.2,
                                                clip_high=0.28, agg="token-mean"))
    loss.backward()
    r = torch.exp(LOGP - OLD)
    r_hat = r.clamp(0.8, 1.28)
    want_grad = -(r_hat * ADV * MASK) / MASK.sum()
    torch.testing.assert_close(logp.grad, want_grad, atol=1e-6, rtol=0)
    want_loss = -(r_hat * ADV * LOGP * MASK).sum() / MASK.sum()
    assert loss.item() == pytest.approx(want_loss.item(), abs=1e-6)
    # clipped: row 0's e^0.3 = 1.35 and e^-0.4 = 0.67, row 1's e^-0.3 = 0.74 (row 2's e^0.2 =
    # 1.22 is inside 1.28): 3 of 6 valid tokens
    assert metrics["pg_clipfrac"].item() == pytest.approx(0.5)


def test_cispo_keeps_the_gradient_of_clipped_tokens():
    # ratio e^2 far above 1 + clip_high: PPO's clip gives this A > 0 token gradient 0,
    # CISPO gives it -(1 + clip_high) * A.
    logp, ppo_logp = (T([[2.0]], requires_grad=True) for _ in range(2))
    cispo_loss(PolicyLossInputs(logp, T([[0.0]]), T([[1.0]]), T([[1.0]])))[0].backward()
    ppo_clip_loss(PolicyLossInputs(ppo_logp, T([[0.0]]), T([[1.0]]), T([[1.0]])))[0].backward()
    assert logp.grad.item() == pytest.approx(-1.2)
    assert ppo_logp.grad.item() == 0.0


@pytest.mark.parametrize("fn", [gspo_loss, cispo_loss])
def test_is_weights_scale_each_token(fn):
    logp, weighted = (LOGP.clone().requires_grad_() for _ in range(2))
    w = T([[0.5, 1.0, 2.0], [1.5, 0.0, 9.0], [0.25, 9.0, 9.0]])
    fn(PolicyLossInputs(logp, OLD, ADV, MASK, agg="token-sum"))[0].backward()
    fn(PolicyLossInputs(weighted, OLD, ADV, MASK, is_weights=w, agg="token-sum"))[0].backward()
    torch.testing.assert_close(weighted.grad, logp.grad * w * MASK)


@settings(max_examples=25, deadline=None)
@given(mask=masks(3, 4))
def test_masked_tokens_never_matter(mask):
    """Whatever masked positions hold (even inf/NaN), the loss and gradients are unchanged."""
    g = torch.Generator().manual_seed(0)
    shape = mask.shape
    logp, old, adv = (torch.randn(shape, generator=g) for _ in range(3))
    junk = torch.full(shape, float("nan"))
    for fn in (gspo_loss, cispo_loss):
        clean, dirty = logp.clone().requires_grad_(), logp.clone().requires_grad_()
        keep = mask > 0
        a, _ = fn(PolicyLossInputs(clean, old, adv, mask))
        b, _ = fn(PolicyLossInputs(
            torch.where(keep, dirty, junk), torch.where(keep, old, junk),
            torch.where(keep, adv, -junk), mask))
        a.backward()
        b.backward()
        assert math.isfinite(b.item())
        assert a.item() == pytest.approx(b.item(), abs=1e-6)
        torch.testing.assert_close(dirty.grad, clean.grad)
        assert (clean.grad[~keep] == 0).all()


# ----------------------------------------------------------------------------- edges
def test_gspo_log_ratio_is_clamped_at_10():
    # sequence log-ratio 15 -> 10: a negative advantage pays exactly exp(10) (the unclipped term)
    loss, metrics = gspo_loss(PolicyLossInputs(T([[15.0]]), T([[0.0]]), T([[-1.0]]), T([[1.0]])))
    assert loss.item() == pytest.approx(math.exp(10.0), rel=1e-6)
    assert metrics["ppo_kl"].item() == pytest.approx(-15.0)  # the metric is not clamped


def test_cispo_log_ratio_is_clamped_at_20():
    loss, metrics = cispo_loss(PolicyLossInputs(T([[30.0]]), T([[0.0]]), T([[1.0]]), T([[1.0]])))
    assert metrics["ppo_kl"].item() == pytest.approx(-20.0)
    assert loss.item() == pytest.approx(-1.2 * 30.0)  # weight 1 + clip_high, times logp
    assert metrics["pg_clipfrac"].item() == 1.0


def test_gspo_sequence_without_valid_tokens_adds_nothing():
    # an empty row adds nothing to the loss, the gradient or the clip fraction
    logp = T([[-1.0, -2.0], [-0.5, -0.5]], requires_grad=True)
    mask = T([[1.0, 1.0], [0.0, 0.0]])
    loss, metrics = gspo_loss(PolicyLossInputs(logp, T([[-1.0, -2.0], [0.0, 0.0]]),
                                               T([[1.0, 1.0], [1.0, 1.0]]), mask,
                                               agg="token-sum"))
    loss.backward()
    assert loss.item() == pytest.approx(-2.0)
    torch.testing.assert_close(logp.grad, T([[-1.0, -1.0], [0.0, 0.0]]))
    assert metrics["pg_clipfrac"].item() == 0.0


@pytest.mark.parametrize("fn", [gspo_loss, cispo_loss])
def test_is_weights_are_detached_and_metrics_carry_no_grad(fn):
    logp = LOGP.clone().requires_grad_()
    w = torch.full_like(LOGP, 0.5).requires_grad_()
    loss, metrics = fn(PolicyLossInputs(logp, OLD, ADV, MASK, is_weights=w))
    loss.backward()
    assert w.grad is None
    assert not any(v.requires_grad for v in metrics.values())
    assert metrics["pg_loss"].item() == pytest.approx(loss.item())


@pytest.mark.parametrize("shape", [(3,), (1, 2, 3)])
def test_gspo_needs_rows(shape):
    t = torch.zeros(shape)
    with pytest.raises(ShapeError, match=r"gspo needs \(batch, response_len\).*got \("):
        gspo_loss(PolicyLossInputs(t, t, t, torch.ones(shape)))
