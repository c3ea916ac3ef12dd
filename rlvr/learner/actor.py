"""The actor: the policy being trained with the PPO clipped loss (GRPO-family estimators too).

Stage B: ``compute_logprobs`` gives the old logprobs (and entropy) in micro-batches without grad.
Stage C: ``update`` runs K epochs of shuffled mini-batches with gradient accumulation over
micro-batches; per micro-batch the loss is

    POLICY_LOSSES[policy_loss](logp, old_logp, advantages; clip_low, clip_high, dual_clip,
                               loss_agg, tis weights)     (default: PPO clip, ``vanilla``)
    + kl_loss_coef * agg(kl_penalty(logp, ref_logp))      (when kl_loss_coef > 0)
    - entropy_coef * agg(entropy)                          (when entropy_coef > 0)

with all loss math from ``rlvr.algorithms.losses``, ``rlvr.algorithms.kl`` and
``rlvr.algorithms.aggregate``. Truncated
importance-sampling weights ``min(exp(old_logp - rollout_logp), tis_cap)`` are used when
``tis_cap`` is set.

On-policy fast path, decided in one place (``set_old_logprobs``): when the update is ONE
optimizer step (one epoch, one mini-batch holding the whole batch) and nothing reads the old
logprobs before it (no KL in the reward), they are by definition the logprobs of the update's
own forward before the step, so stage B computes none and ``update`` takes them from that forward
(detached): the ratio is exactly 1 and the gradient is the one a separate no-grad forward would
give (up to float rounding), at the cost of one forward less. The rollout/learner mismatch
(``rollout/logprob_diff``, ``rollout/kl``) is measured by one function (``_rollout_mismatch``)
from whichever forward gave the old logprobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch

from rlvr.algorithms.aggregate import aggregate
from rlvr.algorithms.kl import kl_loss, kl_penalty
from rlvr.algorithms.losses import POLICY_LOSSES, PolicyLossInputs, truncated_is_weights
from rlvr.batch import RolloutBatch
from rlvr.distributed import all_reduce_sum
from rlvr.errors import BatchError
from rlvr.learner.config import ActorConfig
from rlvr.learner.loading import build_sharded, empty_causal_lm
from rlvr.learner.logprobs import policy_forward
from rlvr.learner.lora import adapter_state, apply_lora, merged_tensors
from rlvr.learner.modules import load_causal_lm
from rlvr.learner.parallel import DistInfo, init_distributed
from rlvr.learner.sharded import TrainedModel, shard


class Actor(TrainedModel):
    """The trained policy, FSDP2-sharded, with AdamW.

    The sharded ``module`` is a normal HF causal LM otherwise: it can ``generate()`` (with a
    KV cache) in-process, e.g. for the transformers rollout engine, and is in ``eval()`` mode
    outside ``update()``.
    """

    config: ActorConfig

    @classmethod
    def from_pretrained(
        cls, path: str | Path, config: ActorConfig, dist_info: DistInfo | None = None
    ) -> Actor:
        """Load the policy from an HF directory, shard it and build its optimizer.

        The weights are read on rank 0 only and broadcast into the shards
        (``rlvr.learner.loading``).

        Args:
            path: a local HF causal-LM directory.
            config: the actor's learner config (``ActorConfig``).
            dist_info: from ``init_distributed()``; created (world size 1 if not under
                torchrun) when omitted.
        """
        info = dist_info or init_distributed()
        lora = config.lora

        def adapted(module: torch.nn.Module) -> torch.nn.Module:
            # Before the state dict is read: rank 0 scatters the adapter it initialised too.
            return apply_lora(module, lora) if lora is not None else module

        module = build_sharded(
            lambda device: adapted(load_causal_lm(path, device)),
            lambda: adapted(empty_causal_lm(path)),
            lambda m: shard(m, config, info, trainable=True), info,
        )
        return cls(module, config, info)

    def named_sync_tensors(self, *, adapter_only: bool) -> Iterator[tuple[str, torch.Tensor]]:
        """What a weight sync sends (every full tensor, or with LoRA less).

        With LoRA: the adapter alone when the engine holds the same adapter layers
        (``adapter_only``), else the merged weights.

        Collective, like ``named_full_tensors``: every rank iterates it to the end.
        """
        named = self.named_full_tensors()
        if self.config.lora is None:
            return named
        return adapter_state(named) if adapter_only else merged_tensors(named, self.config.lora)

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
        packed = self.config.sequence_packing

        def fn(mb: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
            logp, ent = policy_forward(self.module, mb, temperature, entropy=True, packed=packed)
            return logp, cast(torch.Tensor, ent)  # entropy=True always returns it

        logp, ent = self._map_micro(batch, fn, packed=packed)
        return logp, ent

    @property
    def packed_update(self) -> bool:
        """The policy's update forwards are packed when ``sequence_packing`` is on."""
        return self.config.sequence_packing

    def single_step(self, global_rows: int) -> bool:
        """Whether ``update`` on ``global_rows`` rows (all ranks) is one optimizer step.

        True with one epoch and one mini-batch holding every row: then ``update`` can compute
        the old logprobs itself (see the module docstring), and stage B need not.
        """
        mini = self.config.mini_batch_sequences
        return self.config.epochs == 1 and (mini is None or mini >= global_rows)

    def set_old_logprobs(
        self, batch: RolloutBatch, temperature: float = 1.0, *, needed_before_update: bool = False
    ) -> dict[str, float]:
        """Stage B's old logprobs: set them on ``batch``, or leave them to the update's forward.

        With ``single_step`` and ``needed_before_update`` False, nothing is computed or set:
        ``update`` then takes the old logprobs from its own forward and reports the rollout
        mismatch itself. Otherwise ``old_logprobs`` are set from a separate no-grad forward and
        the mismatch is returned now.

        Args:
            batch: this rank's rows (every rank calls it: the mismatch is summed over ranks).
            temperature: the rollout's sampling temperature.
            needed_before_update: something reads ``old_logprobs`` before ``update`` (the
                in-reward KL penalty).

        Returns:
            ``rollout/logprob_diff`` and ``rollout/kl`` over all ranks (token means of
            ``|old - rollout|`` and of k3 between them) when computed here, else ``{}``.
        """
        if not needed_before_update and self.single_step(len(batch) * self.dist.world_size):
            return {}
        old = self.compute_logprobs(batch, temperature)
        batch.set("old_logprobs", old)
        mask = batch.response_mask
        local = self._rollout_mismatch(old, batch.rollout_logprobs, mask)
        n = mask.sum().double()
        sums = all_reduce_sum(torch.stack(
            [local["logprob_diff"].double() * n, local["kl"].double() * n, n]
        ).to(self.dist.device))
        diff, kl, tokens = sums.tolist()
        tokens = max(tokens, 1.0)
        return {"rollout/logprob_diff": diff / tokens, "rollout/kl": kl / tokens}

    @staticmethod
    def _rollout_mismatch(
        old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """How far the engine's logprobs are from the learner's: token means over ``mask``.

        Args:
            old: ``(B, R)`` the learner's logprobs of the rollout tokens (before the update).
            rollout: ``(B, R)`` the engine's logprobs of the same tokens.
            mask: ``(B, R)``, 1 on model tokens.

        Returns:
            Detached 0-d tensors ``logprob_diff`` (mean ``|old - rollout|``) and ``kl`` (mean k3
            estimate of KL(rollout || learner)).
        """
        with torch.no_grad():
            return {
                "logprob_diff": aggregate((old - rollout).abs(), mask, "token-mean"),
                "kl": aggregate(kl_penalty(rollout, old, "k3"), mask, "token-mean"),
            }

    def update(self, batch: RolloutBatch, temperature: float = 1.0) -> dict[str, float]:
        """One training step of the policy on this rank's rows.

        Args:
            batch: needs ``advantages``; ``ref_logprobs`` when ``kl_loss_coef > 0``;
                ``rollout_logprobs`` are used when ``tis_cap`` is set. ``old_logprobs`` may be
                left unset only when ``single_step`` holds (they are then taken from the
                update's own forward; ``set_old_logprobs`` decides).
            temperature: the rollout's sampling temperature (as for ``compute_logprobs``).

        Returns:
            ``actor/pg_loss``, ``actor/pg_clipfrac``, ``actor/pg_clipfrac_lower``,
            ``actor/ppo_kl``, ``actor/entropy``, ``actor/kl_loss`` (when on),
            ``actor/tis_weight_mean`` (when on), ``actor/grad_norm``, ``actor/lr``,
            ``actor/skipped_steps``; without ``old_logprobs`` also the rollout mismatch
            ``rollout/logprob_diff`` (token mean of ``|logp - rollout_logp|``) and
            ``rollout/kl`` (token mean of k3 between them), over all ranks.

        Raises:
            BatchError: a needed field is not set, or ranks hold different row counts.
        """
        fused = batch.old_logprobs is None
        if fused and not self.single_step(len(batch) * self.dist.world_size):
            raise BatchError(
                "old_logprobs is not set on this batch; only a one-step update (epochs 1, one "
                "mini-batch) can take them from its own forward; call "
                "batch.set('old_logprobs', actor.compute_logprobs(batch))"
            )
        batch.require("advantages")
        if self.config.kl_loss_coef > 0:
            batch.require("ref_logprobs")
        metrics = self.run_update(
            batch, lambda mb: self._loss(mb, temperature, fused), prefix="actor"
        )
        if fused:
            for name in ("logprob_diff", "kl"):
                metrics[f"rollout/{name}"] = metrics.pop(f"actor/rollout_{name}")
        return metrics

    def _loss(
        self, mb: RolloutBatch, temperature: float, fused: bool = False
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The micro-batch loss; ``fused``: old logprobs are this forward's, detached."""
        cfg = self.config
        mask = mb.response_mask
        logp, ent = policy_forward(
            self.module, mb, temperature, entropy=True, entropy_grad=cfg.entropy_coef > 0,
            packed=cfg.sequence_packing,
        )
        ent = cast(torch.Tensor, ent)  # entropy=True always returns it
        old = logp.detach() if fused else mb.require("old_logprobs")
        is_weights = None
        if cfg.tis_cap is not None:
            is_weights = truncated_is_weights(old, mb.rollout_logprobs, mask, cfg.tis_cap)
        loss, metrics = POLICY_LOSSES[cfg.policy_loss].fn(PolicyLossInputs(
            logp, old, mb.require("advantages"), mask, is_weights=is_weights,
            clip_low=cfg.clip_low, clip_high=cfg.clip_high, dual_clip_c=cfg.dual_clip,
            agg=self.micro_loss_agg,
        ))
        metrics["entropy"] = aggregate(ent.detach(), mask, "token-mean")
        if cfg.entropy_coef > 0:
            loss = loss - cfg.entropy_coef * aggregate(ent, mask, self.micro_loss_agg)
        if cfg.kl_loss_coef > 0:
            kl, kl_metrics = kl_loss(
                logp, mb.require("ref_logprobs"), mask, cfg.kl_loss_estimator, self.micro_loss_agg
            )
            loss = loss + cfg.kl_loss_coef * kl
            metrics.update(kl_metrics)
        if is_weights is not None:
            metrics["tis_weight_mean"] = aggregate(is_weights, mask, "token-mean")
        if fused:
            mismatch = self._rollout_mismatch(old, mb.rollout_logprobs, mask)
            metrics |= {f"rollout_{k}": v for k, v in mismatch.items()}
        return loss, metrics


__all__ = ["Actor"]
