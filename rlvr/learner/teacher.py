"""The teacher of on-policy distillation: a frozen model that scores the student's tokens.

It is loaded exactly like the reference policy (``rlvr.learner.reference``): weights read on
rank 0 and broadcast into FSDP2 shards, every parameter frozen, stored in bf16 under bf16
compute; only its path differs (any HF causal LM with the student's tokenizer, usually a larger
or better-trained model). ``rlvr.algorithms.distill`` turns its logprobs into the student's signal.
"""

from __future__ import annotations

import torch

from rlvr.batch import RolloutBatch
from rlvr.learner.reference import Reference


class Teacher(Reference):
    """The frozen teacher, sharded like the reference; ``Teacher.from_pretrained(path, ...)``."""

    def compute_logprobs(self, batch: RolloutBatch, temperature: float = 1.0) -> torch.Tensor:
        """The teacher's logprobs of the student's sampled tokens, without grad.

        Returns:
            ``(B, R)`` float32 on the batch's device, 0 where ``response_mask`` is 0.
        """
        return self._policy_logprobs(batch, temperature)


__all__ = ["Teacher"]
