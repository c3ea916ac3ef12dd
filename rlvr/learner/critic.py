"""The critic: a causal-LM backbone with a scalar value head, trained with the clipped value loss.

Stage B: ``compute_values`` gives ``values`` in micro-batches without grad. Stage C: ``update``
minimises ``rlvr.algorithms.losses.value_loss(values, old_values, returns; value_clip, loss_agg)``
with the
same epochs × mini-batches × accumulated micro-batches loop as the actor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlvr.algorithms.losses import value_loss
from rlvr.batch import RolloutBatch
from rlvr.learner.config import CriticConfig
from rlvr.learner.loading import build_sharded
from rlvr.learner.logprobs import value_forward
from rlvr.learner.modules import CriticModel
from rlvr.learner.parallel import DistInfo, init_distributed
from rlvr.learner.sharded import TrainedModel, shard


class Critic(TrainedModel):
    """The value model, FSDP2-sharded, with AdamW."""

    config: CriticConfig

    @classmethod
    def from_pretrained(
        cls, path: str | Path, config: CriticConfig, dist_info: DistInfo | None = None
    ) -> Critic:
        """Build the critic from an HF directory (the actor's or its own) and shard it.

        Args:
            path: a local HF causal-LM directory; its backbone initialises the critic, the
                value head starts at zero (or from ``value_head.safetensors`` if present).
            config: the critic's learner config (its ``optim`` and ``value_clip`` are used).
            dist_info: from ``init_distributed()``; created when omitted.
        """
        info = dist_info or init_distributed()
        module = build_sharded(
            lambda device: CriticModel.from_pretrained(path, device),
            lambda: CriticModel.empty(path), lambda m: shard(m, config, info, trainable=True),
            info,
        )
        return cls(module, config, info)

    def compute_values(self, batch: RolloutBatch) -> torch.Tensor:
        """Values of the response tokens, without grad (stage B's ``values``).

        Returns:
            ``(B, R)`` float32 on the batch's device: the value before each response token
            (critic output at column ``P + j - 1``), 0 where ``response_mask`` is 0.
        """
        return self._map_micro(batch, lambda mb: (value_forward(self.module, mb),))[0]

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """One training step of the critic on this rank's rows.

        Args:
            batch: needs ``values`` (from ``compute_values``, before any update) and
                ``returns``.

        Returns:
            ``critic/vf_loss``, ``critic/vf_clipfrac``, ``critic/vpred_mean``,
            ``critic/grad_norm``, ``critic/lr``, ``critic/skipped_steps``.

        Raises:
            BatchError: a needed field is not set, or ranks hold different row counts.
        """
        batch.require("values")
        batch.require("returns")
        return self.run_update(batch, self._loss, prefix="critic")

    def _loss(self, mb: RolloutBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        values = value_forward(self.module, mb)
        loss, metrics = value_loss(
            values, mb.require("values"), mb.require("returns"), mb.response_mask,
            clip=self.config.value_clip, agg=self.micro_loss_agg,
        )
        with torch.no_grad():
            denom = mb.response_mask.sum().clamp(min=1)
            metrics["vpred_mean"] = (values * mb.response_mask).sum() / denom
        return loss, metrics


__all__ = ["Critic"]
