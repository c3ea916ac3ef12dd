"""KL in the reward and KL in the loss at once, each with its own estimator and coefficient."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.algorithms.aggregate import aggregate
from rlvr.algorithms.kl import kl_penalty
from rlvr.algorithms.losses import PolicyLossInputs, ppo_clip_loss
from rlvr.batch import RolloutBatch
from rlvr.config import load_config
from rlvr.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
from trainer_helpers import QUIET, SMALL_MODEL  # noqa: E402 (shared trainer-test overrides)

BETA, COEF = 0.5, 0.25


def test_kl_in_reward_and_in_loss_together_known_numbers(tmp_path):
    lines: list[str] = []
    config = load_config(CONFIGS / "quickstart.yaml", SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}", "trainer.steps=1",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "eval.tasks=2",
        "algorithm.kl.placement=both", f"algorithm.kl.reward.coef={BETA}",
        f"algorithm.kl.loss.coef={COEF}", "actor.loss_agg=token-mean",
    ])
    trainer = Trainer(config, log=lines.append)
    try:
        notice = [line for line in lines if "NOTICE" in line]
        assert len(notice) == 1 and "-0.5 * k1" in notice[0] and "+0.25 * agg(k3)" in notice[0]
        assert (trainer.actor.config.kl_loss_coef, trainer.actor.config.kl_loss_estimator) == (
            COEF, "k3")
        with torch.no_grad():  # move the policy away from the reference: KL > 0
            gen = torch.Generator().manual_seed(0)
            for p in trainer.actor.module.parameters():
                local = p.to_local() if hasattr(p, "to_local") else p  # world size 1
                local.add_(0.05 * torch.randn(local.shape, generator=gen).to(local.dtype))
        with trainer.engine_weights():
            trajs, _ = trainer.stream.collect(1)
        batch = RolloutBatch.from_trajectories(trajs, trainer.pad_id)
        trainer.prepare(batch)
        old, ref, mask = batch.require("old_logprobs"), batch.require("ref_logprobs"), \
            batch.response_mask
        k1 = (old - ref) * mask
        assert float(k1.abs().max()) > 1e-3
        # the reward gets -beta * k1 per token
        torch.testing.assert_close(batch.require("token_level_rewards"),
                                   batch.token_level_scores - BETA * k1, atol=1e-6, rtol=0)
        # the loss gets coef * agg(k3): before the step the policy is the old one (ratio 1)
        cfg = trainer.actor.config
        loss, metrics = trainer.actor._loss(batch, trainer.temperature)
        pg, _ = ppo_clip_loss(PolicyLossInputs(
            old, old, batch.require("advantages"), mask, clip_low=cfg.clip_low,
            clip_high=cfg.clip_high, dual_clip_c=cfg.dual_clip, agg=cfg.loss_agg))
        k3 = aggregate(kl_penalty(old, ref, "k3"), mask, cfg.loss_agg)
        assert float(k3) > 1e-6
        assert float(metrics["kl_loss"]) == pytest.approx(float(k3), abs=1e-5)
        assert float(loss.detach()) == pytest.approx(float(pg + COEF * k3), abs=1e-5)
    finally:
        trainer.close()
