"""The actor's loss with ``tis_cap`` and recomputed old logprobs IS decoupled PPO (AReaL)."""

from __future__ import annotations

import pytest
import torch
from learner_helpers import make_batch, with_advantages

from rlvr.algorithms.decoupled_ppo import decoupled_ppo_loss
from rlvr.learner import Actor, ActorConfig


def test_actor_loss_is_decoupled_ppo(tiny_model_path, dist_info):
    actor = Actor.from_pretrained(tiny_model_path, ActorConfig(tis_cap=2.0, micro_batch_size=64),
                                  dist_info)
    batch = with_advantages(make_batch(6, seed=3), seed=3)
    logp = actor.compute_logprobs(batch)
    g = torch.Generator().manual_seed(7)
    proximal = (logp + 0.3 * torch.randn(logp.shape, generator=g)) * batch.response_mask
    batch.set("old_logprobs", proximal)  # behaviour: batch.rollout_logprobs (random, far off)
    with torch.no_grad():
        loss, metrics = actor._loss(batch, 1.0)
    expected, ours = decoupled_ppo_loss(
        logp, proximal, batch.rollout_logprobs, batch.require("advantages"), batch.response_mask,
        tis_cap=2.0, agg=actor.micro_loss_agg)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    assert float(metrics["tis_weight_mean"]) == pytest.approx(
        ours["behaviour_weight_mean"].item(), rel=1e-6)
    assert 0.0 < float(metrics["tis_weight_mean"]) != 1.0  # the behaviour weights did act
