from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import masks

from rlvr.algorithms.aggregate import AGG_MODES, aggregate
from rlvr.algorithms.kl import kl_loss
from rlvr.algorithms.losses import PolicyLossInputs, ppo_clip_loss, truncated_is_weights, value_loss
from rlvr.errors import ConfigError, ShapeError

T = torch.tensor
ATOL = 1e-5


def one(x: float) -> torch.Tensor:
    return T([[x]])


# ----------------------------------------------------------------------------- policy loss
def test_dual_clip_known_answer():
    loss, metrics = ppo_clip_loss(PolicyLossInputs(one(2.0), one(0.0), one(-1.0), one(1.0)))
    assert loss.item() == pytest.approx(3.0)  # ratio e^2, A = -1, c = 3
    assert metrics["pg_clipfrac_lower"].item() == 1.0
    assert metrics["ppo_kl"].item() == pytest.approx(-2.0)
    assert metrics["valid_tokens"].item() == 1.0


@pytest.mark.parametrize(
    ("log_ratio", "advantage", "clip_high", "expected", "clipped"),
    [
        (math.log(1.5), 1.0, 0.2, -1.2, 1.0),  # upper clip for A > 0
        (math.log(1.5), 1.0, 0.28, -1.28, 1.0),  # clip-higher
        (math.log(1.1), 1.0, 0.2, -1.1, 0.0),  # inside the trust region
        (math.log(0.5), -1.0, 0.2, 0.8, 1.0),  # lower clip for A < 0
        (math.log(0.5), 1.0, 0.2, -0.5, 0.0),  # A > 0 below the region: unclipped (pessimistic)
        (math.log(2.5), -1.0, 0.2, 2.5, 0.0),  # A < 0 above: unclipped, below the dual bound
    ],
)
def test_policy_loss_clipping_cases(log_ratio, advantage, clip_high, expected, clipped):
    loss, metrics = ppo_clip_loss(PolicyLossInputs(
        one(log_ratio), one(0.0), one(advantage), one(1.0), clip_high=clip_high
    ))
    assert loss.item() == pytest.approx(expected, abs=ATOL)
    assert metrics["pg_clipfrac"].item() == clipped
    assert metrics["pg_clipfrac_lower"].item() == 0.0


def test_policy_loss_gradient_and_is_weights():
    logp = T([[-1.0, -2.0]], requires_grad=True)
    old = T([[-1.0, -2.0]])
    a = T([[1.0, -2.0]])
    m = torch.ones(1, 2)
    loss, _ = ppo_clip_loss(PolicyLossInputs(logp, old, a, m))
    loss.backward()
    # at ratio 1 the gradient of -A * ratio / 2 tokens is -A / 2
    assert torch.allclose(logp.grad, T([[-0.5, 1.0]]))
    w = T([[0.5, 2.0]])
    weighted, _ = ppo_clip_loss(PolicyLossInputs(logp, old, a, m, is_weights=w))
    assert weighted.item() == pytest.approx((-1.0 * 0.5 + 2.0 * 2.0) / 2)


def test_policy_loss_rejects_bad_parameters():
    x = one(0.0)
    with pytest.raises(
        ConfigError, match=r"dual_clip_c must be > 1 \(or None to disable\); got 1.0"
    ):
        ppo_clip_loss(PolicyLossInputs(x, x, x, x, dual_clip_c=1.0))
    with pytest.raises(
        ConfigError, match=r"clip_low must be in \[0, 1\) and clip_high >= 0; got 1.0, 0.2"
    ):
        ppo_clip_loss(PolicyLossInputs(x, x, x, x, clip_low=1.0))
    with pytest.raises(
        ShapeError, match=r"advantages has shape \(1, 2\); expected \(1, 1\) like logprobs"
    ):
        ppo_clip_loss(PolicyLossInputs(x, x, torch.zeros(1, 2), x))
    # None disables the dual clip
    no_dual = PolicyLossInputs(one(2.0), one(0.0), one(-1.0), one(1.0), dual_clip_c=None)
    loss, _ = ppo_clip_loss(no_dual)
    assert loss.item() == pytest.approx(math.exp(2.0))


@settings(max_examples=60, deadline=None)
@given(
    st.floats(-25, 25),
    st.floats(-5, 5),
    st.floats(0.0, 0.5),
    st.floats(0.0, 0.5),
    st.floats(1.01, 10),
)
def test_clipped_objective_is_bounded(log_ratio, advantage, clip_low, clip_high, c):
    loss, _ = ppo_clip_loss(PolicyLossInputs(
        one(log_ratio), one(0.0), one(advantage), one(1.0), clip_low=clip_low,
        clip_high=clip_high, dual_clip_c=c,
    ))
    a = abs(advantage)
    assert -a * (1 + clip_high) - 1e-4 <= loss.item() <= a * c + 1e-4


@st.composite
def loss_inputs(draw):
    b, n = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    floats = st.floats(-3, 3, width=32)

    def mat():
        return T(draw(st.lists(st.lists(floats, min_size=n, max_size=n), min_size=b, max_size=b)))

    return mat(), mat(), mat(), draw(masks(b, n))


def _scramble(x, mask, garbage):
    return torch.where(mask == 0, garbage, x)


@settings(max_examples=40, deadline=None)
@given(
    loss_inputs(),
    st.sampled_from(AGG_MODES),
    st.sampled_from([1e6, -1e6, float("inf"), float("nan")]),
)
def test_masked_positions_never_change_losses(inputs, mode, garbage):
    x, y, z, m = inputs
    g = torch.full_like(x, garbage)
    assert torch.equal(aggregate(x, m, mode), aggregate(_scramble(x, m, g), m, mode))
    lp1 = x.clone().requires_grad_()
    lp2 = _scramble(x, m, g).requires_grad_()
    l1, m1 = ppo_clip_loss(PolicyLossInputs(lp1, y, z, m, agg=mode))
    l2, m2 = ppo_clip_loss(
        PolicyLossInputs(lp2, _scramble(y, m, g), _scramble(z, m, g), m, agg=mode)
    )
    assert torch.equal(l1, l2)
    for k in m1:
        assert torch.equal(m1[k], m2[k]), k
    l1.backward()
    l2.backward()
    assert torch.equal(lp1.grad * m, lp2.grad * m) and torch.equal(
        lp2.grad * (1 - m), torch.zeros_like(x)
    )
    v1, _ = value_loss(x, y, z, m, agg=mode)
    v2, _ = value_loss(_scramble(x, m, g), _scramble(y, m, g), _scramble(z, m, g), m, agg=mode)
    assert torch.equal(v1, v2)
    k1, _ = kl_loss(x, y, m, agg=mode)
    k2, _ = kl_loss(_scramble(x, m, g), y, m, agg=mode)
    assert torch.equal(k1, k2)


def test_truncated_is_weights():
    old = T([[-1.0, -1.0, -1.0, -1.0]])
    rollout = T([[-1.0, -2.0, -0.5, -9.0]])
    w = truncated_is_weights(old, rollout, T([[1.0, 1.0, 1.0, 0.0]]), cap=2.0)
    assert torch.allclose(w, T([[1.0, 2.0, math.exp(-0.5), 0.0]]))
    assert not w.requires_grad
    with pytest.raises(ConfigError, match="cap must be > 0; got 0"):
        truncated_is_weights(old, rollout, old, cap=0)


# ----------------------------------------------------------------------------- value loss
def test_value_loss_known_answers():
    loss, metrics = value_loss(one(1.0), one(0.0), one(0.0), one(1.0), clip=0.5)
    assert loss.item() == pytest.approx(0.5) and metrics["vf_clipfrac"].item() == 0.0
    loss, metrics = value_loss(one(1.0), one(0.0), one(2.0), one(1.0), clip=0.5)
    # clipped value 0.5 is farther from the return 2: max(1, 2.25) / 2
    assert loss.item() == pytest.approx(1.125) and metrics["vf_clipfrac"].item() == 1.0
    with pytest.raises(ConfigError, match="clip must be > 0; got 0"):
        value_loss(one(1.0), one(0.0), one(0.0), one(1.0), clip=0)


