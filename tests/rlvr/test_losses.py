from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.errors import ConfigError, ShapeError, UnknownNameError
from rlvr.losses import (
    AGG_MODES,
    KL_KINDS,
    AdaptiveKLController,
    FixedKLController,
    aggregate,
    apply_kl_in_reward,
    entropy_from_logits,
    kl_loss,
    kl_penalty,
    logprobs_from_logits,
    policy_loss,
    truncated_is_weights,
    value_loss,
)

T = torch.tensor
ATOL = 1e-5


def one(x: float) -> torch.Tensor:
    return T([[x]])


# ----------------------------------------------------------------------------- aggregation
LOSS = T([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0], [7.0, 7.0, 7.0, 7.0]])
MASK = T([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 16 / 4),
        ("token-sum", 16.0),
        ("seq-mean-token-sum", (6 + 10) / 2),  # the empty row does not count
        ("seq-mean-token-mean", (2 + 10) / 2),
        ("seq-mean-token-sum-norm", (6 + 10) / 2 / 4),  # default constant: response_len
    ],
)
def test_aggregate_known_values(mode, expected):
    assert aggregate(LOSS, MASK, mode).item() == pytest.approx(expected, abs=ATOL)


def test_aggregate_norm_constant():
    got = aggregate(LOSS, MASK, "seq-mean-token-sum-norm", norm_constant=16)
    assert got.item() == pytest.approx(8 / 16)
    with pytest.raises(ConfigError, match="norm_constant must be > 0; got 0"):
        aggregate(LOSS, MASK, "seq-mean-token-sum-norm", norm_constant=0)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_aggregate_all_zero_mask_is_zero_not_nan(mode):
    loss = torch.full((2, 3), float("nan"), requires_grad=True)
    out = aggregate(loss, torch.zeros(2, 3), mode)
    assert out.item() == 0.0
    out.backward()
    assert torch.equal(loss.grad, torch.zeros(2, 3))


def test_aggregate_errors():
    with pytest.raises(
        UnknownNameError,
        match=r"unknown loss aggregation mode 'token_mean'.*Did you mean 'token-mean'",
    ):
        aggregate(LOSS, MASK, "token_mean")
    with pytest.raises(
        ShapeError, match=r"mask has shape \(3, 2\); expected \(3, 4\) like loss_mat"
    ):
        aggregate(LOSS, torch.ones(3, 2))


# ----------------------------------------------------------------------------- policy loss
def test_dual_clip_known_answer():
    loss, metrics = policy_loss(one(2.0), one(0.0), one(-1.0), one(1.0))
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
    loss, metrics = policy_loss(
        one(log_ratio), one(0.0), one(advantage), one(1.0), clip_high=clip_high
    )
    assert loss.item() == pytest.approx(expected, abs=ATOL)
    assert metrics["pg_clipfrac"].item() == clipped
    assert metrics["pg_clipfrac_lower"].item() == 0.0


def test_policy_loss_gradient_and_is_weights():
    logp = T([[-1.0, -2.0]], requires_grad=True)
    old = T([[-1.0, -2.0]])
    a = T([[1.0, -2.0]])
    m = torch.ones(1, 2)
    loss, _ = policy_loss(logp, old, a, m)
    loss.backward()
    # at ratio 1 the gradient of -A * ratio / 2 tokens is -A / 2
    assert torch.allclose(logp.grad, T([[-0.5, 1.0]]))
    w = T([[0.5, 2.0]])
    weighted, _ = policy_loss(logp, old, a, m, is_weights=w)
    assert weighted.item() == pytest.approx((-1.0 * 0.5 + 2.0 * 2.0) / 2)


def test_policy_loss_rejects_bad_parameters():
    x = one(0.0)
    with pytest.raises(
        ConfigError, match=r"dual_clip_c must be > 1 \(or None to disable\); got 1.0"
    ):
        policy_loss(x, x, x, x, dual_clip_c=1.0)
    with pytest.raises(
        ConfigError, match=r"clip_low must be in \[0, 1\) and clip_high >= 0; got 1.0, 0.2"
    ):
        policy_loss(x, x, x, x, clip_low=1.0)
    with pytest.raises(
        ShapeError, match=r"advantages has shape \(1, 2\); expected \(1, 1\) like logprobs"
    ):
        policy_loss(x, x, torch.zeros(1, 2), x)
    # None disables the dual clip
    loss, _ = policy_loss(one(2.0), one(0.0), one(-1.0), one(1.0), dual_clip_c=None)
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
    loss, _ = policy_loss(
        one(log_ratio), one(0.0), one(advantage), one(1.0), clip_low, clip_high, c
    )
    a = abs(advantage)
    assert -a * (1 + clip_high) - 1e-4 <= loss.item() <= a * c + 1e-4


@st.composite
def loss_inputs(draw):
    b, n = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    floats = st.floats(-3, 3, width=32)

    def mat():
        return T(draw(st.lists(st.lists(floats, min_size=n, max_size=n), min_size=b, max_size=b)))

    mask = T(
        draw(
            st.lists(
                st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n),
                min_size=b,
                max_size=b,
            )
        )
    )
    return mat(), mat(), mat(), mask


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
    l1, m1 = policy_loss(lp1, y, z, m, agg=mode)
    l2, m2 = policy_loss(lp2, _scramble(y, m, g), _scramble(z, m, g), m, agg=mode)
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


# ----------------------------------------------------------------------------- KL
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


# ----------------------------------------------------------------------------- logits
def naive_logprobs(logits, labels, t):
    return (
        torch.log_softmax(logits.float() / t, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    )


def naive_entropy(logits, t):
    logp = torch.log_softmax(logits.float() / t, dim=-1)
    return -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_rows", [None, 3])
def test_logprobs_and_entropy_match_naive(temperature, dtype, chunk_rows):
    torch.manual_seed(0)
    logits = (torch.randn(2, 5, 37) * 4).to(dtype).requires_grad_()
    labels = torch.randint(0, 37, (2, 5))
    got = logprobs_from_logits(logits, labels, temperature, chunk_rows=chunk_rows)
    want = naive_logprobs(logits, labels, temperature)
    assert got.dtype == torch.float32 and got.shape == (2, 5)
    assert torch.allclose(got, want, atol=ATOL)
    ent = entropy_from_logits(logits, temperature, chunk_rows=chunk_rows)
    assert torch.allclose(ent, naive_entropy(logits, temperature), atol=1e-4)
    g1 = torch.autograd.grad((got * 0.3 + ent * 0.7).sum(), logits)[0]
    g2 = torch.autograd.grad((want * 0.3 + naive_entropy(logits, temperature) * 0.7).sum(), logits)[
        0
    ]
    assert torch.allclose(g1.float(), g2.float(), atol=1e-4)


def test_temperature_zero_is_one_and_negative_raises():
    logits = torch.randn(4, 9)
    labels = torch.randint(0, 9, (4,))
    assert torch.equal(
        logprobs_from_logits(logits, labels, 0.0), logprobs_from_logits(logits, labels, 1.0)
    )
    assert torch.equal(entropy_from_logits(logits, 0.0), entropy_from_logits(logits, 1.0))
    with pytest.raises(ConfigError, match="temperature must be >= 0; got -1.0"):
        logprobs_from_logits(logits, labels, -1.0)
    with pytest.raises(
        ShapeError, match=r"labels has shape \(3,\); expected logits.shape\[:-1\] = \(4,\)"
    ):
        logprobs_from_logits(logits, labels[:3])


def test_entropy_ignores_minus_inf_logits():
    logits = T([[0.0, 0.0, float("-inf")]])
    assert entropy_from_logits(logits).item() == pytest.approx(math.log(2.0))


def test_no_vocab_sized_float_copy_is_kept_for_backward():
    vocab = 512
    logits = torch.randn(32, vocab, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (32,))
    saved: list[torch.Tensor] = []

    def pack(t):
        saved.append(t)
        return t

    for fn in (
        lambda: logprobs_from_logits(logits, labels, 0.7, chunk_rows=8),
        lambda: entropy_from_logits(logits, 0.7, chunk_rows=8),
    ):
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn().sum().backward()
        big = [t for t in saved if t.numel() >= vocab]
        assert big, "expected the chunks of the input to be saved"
        for t in big:  # only views of the input logits, no float32/scaled copies
            assert t.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()
