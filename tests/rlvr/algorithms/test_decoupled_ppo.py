"""Decoupled PPO (AReaL): known answers on fixed tensors, and k = 0 is PPO exactly."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms.decoupled_ppo import decoupled_ppo_loss
from rlvr.algorithms.losses import PolicyLossInputs, ppo_clip_loss
from rlvr.errors import ConfigError


def _log(*p: float) -> torch.Tensor:
    return torch.tensor([[math.log(x) for x in p]])


def test_known_answer():
    # r = theta/prox = [1.25, 1.0, 1.5]; w = min(prox/behav, 2) = [1, 0.5, 2]
    # token 1 (A=+1): max(-1.25, -1.2) = -1.2 (clipped);  * 1   = -1.2
    # token 2 (A=-1): max(1.0, 1.0)   = 1.0;               * 0.5 = 0.5
    # token 3 (A=+2): max(-3.0, -2.4) = -2.4 (clipped);   * 2   = -4.8
    theta = _log(0.5, 0.3, 0.9).requires_grad_()
    loss, metrics = decoupled_ppo_loss(theta, _log(0.4, 0.3, 0.6), _log(0.4, 0.6, 0.2),
                                       torch.tensor([[1.0, -1.0, 2.0]]), torch.ones(1, 3),
                                       tis_cap=2.0)
    assert loss.item() == pytest.approx(-5.5 / 3, rel=1e-6)
    loss.backward()
    # only token 2 is unclipped: d/dlogp (w * -A * r) = 0.5 * 1 * r(=1) over 3 tokens
    assert theta.grad is not None
    torch.testing.assert_close(theta.grad, torch.tensor([[0.0, 0.5 / 3, 0.0]]))
    assert metrics["behaviour_weight_mean"].item() == pytest.approx(3.5 / 3, rel=1e-6)
    assert metrics["pg_clipfrac"].item() == pytest.approx(2 / 3, rel=1e-6)


def test_masked_tokens_count_for_nothing():
    theta = _log(0.5, 0.3, 0.9)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    behav = _log(0.4, 0.6, 0.2)
    behav[0, 2] = float("nan")  # whatever a masked position holds
    loss, _ = decoupled_ppo_loss(theta, _log(0.4, 0.3, 0.6), behav,
                                 torch.tensor([[1.0, -1.0, 2.0]]), mask, tis_cap=2.0)
    assert loss.item() == pytest.approx((-1.2 + 0.5) / 2, rel=1e-6)


def test_behaviour_equal_to_proximal_is_ppo_exactly():
    """With k = 0 (the engine in sync) the weights are 1 and the numbers are PPO's, bit for bit."""
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(4, 7, generator=gen).requires_grad_()
    old = torch.randn(4, 7, generator=gen)
    adv = torch.randn(4, 7, generator=gen)
    mask = (torch.rand(4, 7, generator=gen) > 0.3).float()
    for agg in ("token-mean", "seq-mean-token-mean"):
        ours, _ = decoupled_ppo_loss(theta, old, old.clone(), adv, mask, tis_cap=2.0, agg=agg)
        ppo, _ = ppo_clip_loss(PolicyLossInputs(theta, old, adv, mask, agg=agg))
        assert torch.equal(ours, ppo)
        g_ours, = torch.autograd.grad(ours, theta)
        g_ppo, = torch.autograd.grad(ppo, theta)
        assert torch.equal(g_ours, g_ppo)


def test_bad_cap_is_refused():
    x = torch.zeros(1, 2)
    with pytest.raises(ConfigError, match="cap"):
        decoupled_ppo_loss(x, x, x, x, torch.ones(1, 2), tis_cap=0.0)
