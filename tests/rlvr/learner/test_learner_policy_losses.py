"""A new policy loss is one registered function: GSPO, registered here, trains through the config.

GSPO (Zheng et al. 2025, https://arxiv.org/abs/2507.18071) replaces PPO's per-token ratio by the
sequence's length-normalised ratio ``s_i = exp(mean_t(logp - old_logp))``, used token by token as
``s_i,t = sg(s_i) * exp(logp_t - sg(logp_t))`` (same value, per-token gradient), clipped like PPO
and aggregated ``seq-mean-token-mean``; this transcribes verl 0.9.1 ``compute_policy_loss_gspo``.
It is registered by the test, not shipped, to show the path a user takes.
"""

from __future__ import annotations

import math

import pytest
import torch
from learner_helpers import make_batch, params, with_advantages

from rlvr.aggregate import aggregate
from rlvr.config import load_config
from rlvr.errors import ConfigError, DuplicateNameError, UnknownNameError
from rlvr.learner import Actor, ActorConfig, OptimConfig
from rlvr.losses import (
    POLICY_LOSSES,
    PolicyLossInputs,
    ppo_clip_loss,
    register_policy_loss,
)
from rlvr.masked import masked, masked_mean

T = torch.tensor


def gspo_loss(x: PolicyLossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO's sequence-level clipped objective (verl's ``compute_policy_loss_gspo``)."""
    mask = x.response_mask
    logp, old, adv = (masked(t, mask) for t in (x.logprobs, x.old_logprobs, x.advantages))
    m = mask.to(logp.dtype)
    seq_log_ratio = ((logp - old) * m).sum(-1) / m.sum(-1).clamp(min=1)
    log_ratio = (logp - logp.detach() + seq_log_ratio.detach()[:, None]).clamp(max=10.0)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - x.clip_low, 1.0 + x.clip_high)
    loss = aggregate(torch.maximum(unclipped, clipped), mask, x.agg)
    with torch.no_grad():
        metrics = {
            "pg_loss": loss.detach(),
            "pg_clipfrac": masked_mean((clipped > unclipped).float(), mask),
            "ppo_kl": masked_mean(old - logp, mask),
            "valid_tokens": (mask != 0).sum().float(),
        }
    return loss, metrics


@pytest.fixture
def gspo():
    """``gspo`` registered for one test, then removed (the registry is restored)."""
    before = dict(POLICY_LOSSES)
    register_policy_loss("gspo", paper="https://arxiv.org/abs/2507.18071")(gspo_loss)
    yield "gspo"
    POLICY_LOSSES.remove("gspo")
    assert dict(POLICY_LOSSES) == before


LOGP = T([[-1.0, -2.0], [-0.5, 7.0]])
OLD = T([[-1.2, -1.9], [-0.5, -9.0]])
ADV = T([[1.0, 1.0], [-1.0, 5.0]])
MASK = T([[1.0, 1.0], [1.0, 0.0]])


def test_gspo_known_answer():
    # row 0: s = exp(mean(0.2, -0.1)) = exp(0.05), inside [0.8, 1.2]: -A * s on both tokens;
    # row 1: s = exp(0) = 1: -(-1) * 1. seq-mean-token-mean: (-exp(0.05) + 1) / 2.
    logp = LOGP.clone().requires_grad_()
    loss, metrics = gspo_loss(PolicyLossInputs(logp, OLD, ADV, MASK, agg="seq-mean-token-mean"))
    assert loss.item() == pytest.approx((1 - math.exp(0.05)) / 2, abs=1e-6)
    assert metrics["pg_clipfrac"].item() == 0.0
    loss.backward()
    # d/dlogp of each token: (1/2 rows) * (1/len) * (-A) * s; the masked token gets 0.
    want = T([[-0.25 * math.exp(0.05)] * 2, [0.5, 0.0]])
    torch.testing.assert_close(logp.grad, want, atol=1e-6, rtol=0)
    # PPO's token ratio exp(0.2) is clipped at 1.2 on row 0, token 0: no gradient there
    ppo_logp = LOGP.clone().requires_grad_()
    ppo, _ = ppo_clip_loss(PolicyLossInputs(ppo_logp, OLD, ADV, MASK, agg="seq-mean-token-mean"))
    ppo.backward()
    assert ppo_logp.grad[0, 0].item() == 0.0
    # a tighter clip catches the sequence ratio exp(0.05) > 1.04 on both tokens of row 0
    clipped, metrics = gspo_loss(PolicyLossInputs(LOGP, OLD, ADV, MASK, clip_high=0.04,
                                                  agg="seq-mean-token-mean"))
    assert clipped.item() == pytest.approx((-1.04 + 1) / 2, abs=1e-6)
    assert metrics["pg_clipfrac"].item() == pytest.approx(2 / 3)


def test_policy_loss_registry(gspo):
    assert POLICY_LOSSES["vanilla"].fn is ppo_clip_loss
    assert POLICY_LOSSES[gspo].fn is gspo_loss
    with pytest.raises(DuplicateNameError, match="policy loss 'gspo' is already registered"):
        register_policy_loss(gspo)(gspo_loss)
    with pytest.raises(UnknownNameError, match=r"unknown policy loss 'gpso'.*Did you mean 'gspo'"):
        POLICY_LOSSES["gpso"]
    with pytest.raises(ConfigError, match=r"policy_loss: unknown value 'gpso'; allowed: gspo, "
                       r"vanilla\. Did you mean 'gspo'"):
        ActorConfig(policy_loss="gpso")


def test_a_registered_loss_trains_a_step_through_the_config(tiny_model_path, dist_info, gspo):
    cfg = load_config(None, ["actor.policy_loss=gspo", "actor.loss_agg=seq-mean-token-mean",
                             "actor.micro_batch_size=16", "actor.optim.lr=1e-3"])
    actor_cfg = cfg.learner_configs()[0]
    assert actor_cfg.policy_loss == "gspo"
    actor = Actor.from_pretrained(tiny_model_path, actor_cfg, dist_info)
    vanilla = Actor.from_pretrained(
        tiny_model_path, ActorConfig(optim=OptimConfig(lr=1e-3), micro_batch_size=16,
                                       loss_agg="seq-mean-token-mean"), dist_info)
    batch = with_advantages(make_batch(8, seed=3), seed=3)
    g = torch.Generator().manual_seed(3)
    logp = actor.compute_logprobs(batch)
    batch.set("old_logprobs", (logp + 0.3 * torch.randn(logp.shape, generator=g))
              * batch.response_mask)
    want, _ = gspo_loss(PolicyLossInputs(
        logp, batch.old_logprobs, batch.require("advantages"), batch.response_mask,
        clip_low=actor_cfg.clip_low, clip_high=actor_cfg.clip_high, agg="seq-mean-token-mean"))
    start = params(actor.module)
    metrics = actor.update(batch)
    assert metrics["actor/pg_loss"] == pytest.approx(float(want), rel=1e-5, abs=1e-6)
    assert "actor/pg_clipfrac_lower" not in metrics  # GSPO's own metrics, not PPO's
    moved = max(float((p - start[k]).abs().max()) for k, p in params(actor.module).items())
    assert moved > 1e-4
    assert vanilla.update(batch)["actor/pg_loss"] != pytest.approx(metrics["actor/pg_loss"])
