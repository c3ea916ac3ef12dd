"""The reference policy: a frozen copy of the initial policy, for KL terms (no grad, no optimizer).

Build it only when a KL term is configured. Its weights are read on rank 0 and broadcast into the
shards; under bf16 compute (``mixed_precision`` auto on GPU, or bf16) they are stored in bf16,
half the memory of fp32 master weights it has no use for.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlvr.data import RolloutBatch
from rlvr.learner.config import ActorConfig
from rlvr.learner.loading import build_sharded, empty_causal_lm
from rlvr.learner.modules import load_causal_lm
from rlvr.learner.parallel import DistInfo, init_distributed, mixed_precision_policy
from rlvr.learner.worker import ShardedModel, shard


class Reference(ShardedModel):
    """The frozen reference policy, FSDP2-sharded; every parameter has ``requires_grad=False``."""

    config: ActorConfig

    @classmethod
    def from_pretrained(
        cls, path: str | Path, config: ActorConfig, dist_info: DistInfo | None = None
    ) -> Reference:
        """Load the reference policy from an HF directory (usually the actor's initial one).

        Args:
            path: a local HF causal-LM directory.
            config: the actor's config (micro-batching, ``mixed_precision`` and ``sequence_packing``
                are used).
            dist_info: from ``init_distributed()``; created when omitted.
        """
        info = dist_info or init_distributed()
        # Frozen: no fp32 master weights needed. Under bf16 compute (GPU) it is kept in bf16.
        bf16 = mixed_precision_policy(config.mixed_precision, info.device).param_dtype
        dtype = torch.bfloat16 if bf16 == torch.bfloat16 else torch.float32
        module = build_sharded(
            lambda device: load_causal_lm(path, device, dtype),
            lambda: empty_causal_lm(path, dtype),
            lambda m: shard(m, config, info, trainable=False), info,
        )
        return cls(module, config, info)

    def compute_logprobs(self, batch: RolloutBatch, temperature: float = 1.0) -> torch.Tensor:
        """Reference token logprobs of the responses (``ref_logprobs``), without grad.

        Returns:
            ``(B, R)`` float32 on the batch's device, 0 where ``response_mask`` is 0.
        """
        return self._policy_logprobs(batch, temperature)


__all__ = ["Reference"]
