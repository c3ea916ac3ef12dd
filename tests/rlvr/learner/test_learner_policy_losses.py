"""A new policy loss is one registered function that trains through the config.

A plain policy gradient (``-A * logp``, no ratio, no clip), registered by the test and removed
after it, shows the path a user takes; the shipped ``gspo`` trains one step through the config.
"""

from __future__ import annotations

import pytest
import torch
from learner_helpers import make_batch, params, with_advantages

from rlvr.algorithms.aggregate import aggregate
from rlvr.algorithms.losses import (
    POLICY_LOSSES,
    PolicyLossInputs,
    gspo_loss,
    ppo_clip_loss,
    register_policy_loss,
)
from rlvr.algorithms.masked import masked
from rlvr.config import load_config
from rlvr.errors import ConfigError, DuplicateNameError, UnknownNameError
from rlvr.learner import Actor, ActorConfig, OptimConfig


def plain_pg_loss(x: PolicyLossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REINFORCE's ``-A * logp``, aggregated like the config says."""
    mask = x.response_mask
    per_token = -masked(x.advantages, mask) * masked(x.logprobs, mask)
    loss = aggregate(per_token, mask, x.agg)
    return loss, {"pg_loss": loss.detach(), "valid_tokens": (mask != 0).sum().float()}


@pytest.fixture
def plain_pg():
    """``plain_pg`` registered for one test, then removed (the registry is restored)."""
    before = dict(POLICY_LOSSES)
    register_policy_loss("plain_pg")(plain_pg_loss)
    yield "plain_pg"
    POLICY_LOSSES.remove("plain_pg")
    assert dict(POLICY_LOSSES) == before


def test_policy_loss_registry(plain_pg):
    assert POLICY_LOSSES["vanilla"].fn is ppo_clip_loss
    assert POLICY_LOSSES["gspo"].fn is gspo_loss
    assert POLICY_LOSSES[plain_pg].fn is plain_pg_loss
    with pytest.raises(DuplicateNameError, match="policy loss 'gspo' is already registered"):
        register_policy_loss("gspo")(gspo_loss)
    with pytest.raises(UnknownNameError, match=r"unknown policy loss 'gpso'.*Did you mean 'gspo'"):
        POLICY_LOSSES["gpso"]
    with pytest.raises(ConfigError, match=r"policy_loss: unknown value 'gpso'; allowed: cispo, "
                       r"gspo, plain_pg, vanilla\. Did you mean 'gspo'"):
        ActorConfig(policy_loss="gpso")


def test_a_registered_loss_trains_a_step_through_the_config(tiny_model_path, dist_info, plain_pg):
    cfg = load_config(None, [f"actor.policy_loss={plain_pg}", "actor.micro_batch_size=16",
                             "actor.optim.lr=1e-3"])
    actor = Actor.from_pretrained(tiny_model_path, cfg.learner_configs()[0], dist_info)
    batch = with_advantages(make_batch(8, seed=3), seed=3)
    logp = actor.compute_logprobs(batch)
    batch.set("old_logprobs", logp)
    want, _ = plain_pg_loss(PolicyLossInputs(
        logp, logp, batch.require("advantages"), batch.response_mask))
    metrics = actor.update(batch)
    assert metrics["actor/pg_loss"] == pytest.approx(float(want), rel=1e-5, abs=1e-6)
    assert "actor/pg_clipfrac" not in metrics  # its own metrics, not PPO's


def test_gspo_trains_a_step_through_the_config(tiny_model_path, dist_info):
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
