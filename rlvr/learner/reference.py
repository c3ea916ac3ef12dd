"""The reference policy: a frozen copy of the initial policy, for KL terms (no grad, no optimizer).

Build it only when a KL term is configured.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlvr.data import RolloutBatch
from rlvr.learner.config import LearnerConfig
from rlvr.learner.modules import load_causal_lm
from rlvr.learner.parallel import DistInfo, init_distributed
from rlvr.learner.worker import ShardedModel, shard


class Reference(ShardedModel):
    """The frozen reference policy, FSDP2-sharded; every parameter has ``requires_grad=False``."""

    @classmethod
    def from_pretrained(
        cls, path: str | Path, config: LearnerConfig, dist_info: DistInfo | None = None
    ) -> Reference:
        """Load the reference policy from an HF directory (usually the actor's initial one).

        Args:
            path: a local HF causal-LM directory.
            config: a learner config (``micro_batch_size`` and ``mixed_precision`` are used).
            dist_info: from ``init_distributed()``; created when omitted.
        """
        info = dist_info or init_distributed()
        module = shard(load_causal_lm(path, info.device), config, info, trainable=False)
        return cls(module, config, info)

    def compute_logprobs(self, batch: RolloutBatch, temperature: float = 1.0) -> torch.Tensor:
        """Reference token logprobs of the responses (``ref_logprobs``), without grad.

        Returns:
            ``(B, R)`` float32 on the batch's device, 0 where ``response_mask`` is 0.
        """
        return self._policy_logprobs(batch, temperature)


__all__ = ["Reference"]
