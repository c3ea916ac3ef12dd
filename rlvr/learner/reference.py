"""The reference policy: a frozen copy of the initial policy, for KL terms (no grad, no optimizer).

Build it only when a KL term is configured, with ``reference_for``. Its weights are read on rank 0
and broadcast into the shards; under bf16 compute (``mixed_precision`` auto on GPU, or bf16) they
are stored in bf16, half the memory of fp32 master weights it has no use for. A LoRA actor needs
no copy: its reference is its own module with the adapters switched off (``AdapterOffReference``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlvr.batch import RolloutBatch
from rlvr.learner.actor import Actor
from rlvr.learner.config import ActorConfig
from rlvr.learner.loading import build_sharded, empty_causal_lm
from rlvr.learner.lora import adapters_disabled
from rlvr.learner.modules import load_causal_lm
from rlvr.learner.parallel import DistInfo, init_distributed, mixed_precision_policy
from rlvr.learner.sharded import ShardedModel, shard


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


class AdapterOffReference:
    """The reference of a LoRA actor: the actor's own module with its adapters switched off.

    The base weights are frozen, so this is exactly the initial policy, at the cost of one
    forward and no weights of its own.
    """

    def __init__(self, actor: Actor) -> None:
        self.actor = actor

    def compute_logprobs(self, batch: RolloutBatch, temperature: float = 1.0) -> torch.Tensor:
        """The base model's token logprobs of the responses (``ref_logprobs``), without grad."""
        with adapters_disabled(self.actor.module):
            return self.actor._policy_logprobs(batch, temperature)


def reference_for(
    actor: Actor, path: str | Path, config: ActorConfig, dist_info: DistInfo
) -> Reference | AdapterOffReference:
    """The reference policy of ``actor``: the adapter-off actor with LoRA, else a frozen copy."""
    if config.lora is not None:
        return AdapterOffReference(actor)
    return Reference.from_pretrained(path, config, dist_info)


__all__ = ["AdapterOffReference", "Reference", "reference_for"]
