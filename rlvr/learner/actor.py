"""The actor: the policy being trained with the PPO clipped loss (GRPO-family estimators too).

Stage B: ``compute_logprobs`` gives the old logprobs (and entropy) in micro-batches without grad.
Stage C: ``update`` runs K epochs of shuffled mini-batches with gradient accumulation over
micro-batches; per micro-batch the loss is

    policy_loss(logp, old_logp, advantages; clip_low, clip_high, dual_clip, loss_agg, tis weights)
    + kl_loss_coef * agg(kl_penalty(logp, ref_logp))      (when kl_loss_coef > 0)
    - entropy_coef * agg(entropy)                          (when entropy_coef > 0)

with all loss math from ``rlvr.losses``. Truncated importance-sampling weights
``min(exp(old_logp - rollout_logp), tis_cap)`` are used when ``tis_cap`` is set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch

from rlvr.data import RolloutBatch
from rlvr.learner.config import LearnerConfig
from rlvr.learner.logprobs import policy_forward
from rlvr.learner.modules import load_causal_lm
from rlvr.learner.parallel import DistInfo, init_distributed
from rlvr.learner.worker import TrainedModel, shard
from rlvr.losses import aggregate, kl_loss, policy_loss, truncated_is_weights


class Actor(TrainedModel):
    """The trained policy, FSDP2-sharded, with AdamW.

    The sharded ``module`` is a normal HF causal LM otherwise: it can ``generate()`` (with a
    KV cache) in-process, e.g. for the transformers rollout engine, and is in ``eval()`` mode
    outside ``update()``.
    """

    @classmethod
    def from_pretrained(
        cls, path: str | Path, config: LearnerConfig, dist_info: DistInfo | None = None
    ) -> Actor:
        """Load the policy from an HF directory, shard it and build its optimizer.

        Args:
            path: a local HF causal-LM directory.
            config: the actor's learner config.
            dist_info: from ``init_distributed()``; created (world size 1 if not under
                torchrun) when omitted.
        """
        info = dist_info or init_distributed()
        module = shard(load_causal_lm(path, info.device), config, info, trainable=True)
        return cls(module, config, info)

    def compute_logprobs(self, batch: RolloutBatch, temperature: float = 1.0) -> torch.Tensor:
        """Token logprobs of the responses, without grad (stage B's ``old_logprobs``).

        Args:
            batch: the rows of this rank.
            temperature: the rollout's sampling temperature.

        Returns:
            ``(B, R)`` float32 on the batch's device, 0 where ``response_mask`` is 0.
        """
        return self._policy_logprobs(batch, temperature)

    def compute_logprobs_and_entropy(
        self, batch: RolloutBatch, temperature: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Like ``compute_logprobs``, plus the per-token entropy ``(B, R)`` (0 where masked)."""
        def fn(mb: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
            logp, ent = policy_forward(self.module, mb, temperature, entropy=True)
            return logp, cast(torch.Tensor, ent)  # entropy=True always returns it

        logp, ent = self._map_micro(batch, fn)
        return logp, ent

    def update(self, batch: RolloutBatch, temperature: float = 1.0) -> dict[str, float]:
        """One training step of the policy on this rank's rows.

        Args:
            batch: needs ``old_logprobs`` and ``advantages``; ``ref_logprobs`` when
                ``kl_loss_coef > 0``; ``rollout_logprobs`` are used when ``tis_cap`` is set.
            temperature: the rollout's sampling temperature (as for ``compute_logprobs``).

        Returns:
            ``actor/pg_loss``, ``actor/pg_clipfrac``, ``actor/pg_clipfrac_lower``,
            ``actor/ppo_kl``, ``actor/entropy``, ``actor/kl_loss`` (when on),
            ``actor/tis_weight_mean`` (when on), ``actor/grad_norm``, ``actor/lr``,
            ``actor/skipped_steps``.

        Raises:
            BatchError: a needed field is not set, or ranks hold different row counts.
        """
        batch.require("old_logprobs")
        batch.require("advantages")
        if self.config.kl_loss_coef > 0:
            batch.require("ref_logprobs")
        return self.run_update(batch, lambda mb: self._loss(mb, temperature), prefix="actor")

    def _loss(self, mb: RolloutBatch, temperature: float) -> tuple[torch.Tensor, dict[str, Any]]:
        cfg = self.config
        mask = mb.response_mask
        logp, ent = policy_forward(
            self.module, mb, temperature, entropy=True, entropy_grad=cfg.entropy_coef > 0
        )
        ent = cast(torch.Tensor, ent)  # entropy=True always returns it
        is_weights = None
        if cfg.tis_cap is not None:
            is_weights = truncated_is_weights(
                mb.require("old_logprobs"), mb.rollout_logprobs, mask, cfg.tis_cap
            )
        loss, metrics = policy_loss(
            logp, mb.require("old_logprobs"), mb.require("advantages"), mask,
            clip_low=cfg.clip_low, clip_high=cfg.clip_high, dual_clip_c=cfg.dual_clip,
            agg=cfg.loss_agg, is_weights=is_weights,
        )
        metrics["entropy"] = aggregate(ent.detach(), mask, "token-mean")
        if cfg.entropy_coef > 0:
            loss = loss - cfg.entropy_coef * aggregate(ent, mask, cfg.loss_agg)
        if cfg.kl_loss_coef > 0:
            kl, kl_metrics = kl_loss(
                logp, mb.require("ref_logprobs"), mask, cfg.kl_loss_estimator, cfg.loss_agg
            )
            loss = loss + cfg.kl_loss_coef * kl
            metrics.update(kl_metrics)
        if is_weights is not None:
            metrics["tis_weight_mean"] = aggregate(is_weights, mask, "token-mean")
        return loss, metrics


__all__ = ["Actor"]
