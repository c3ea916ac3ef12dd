"""The FSDP2 learner: actor, critic and reference models, their updates and checkpoints.

Typical use (stage B and C of a training step)::

    info = init_distributed()                       # world size 1 without torchrun
    actor = Actor.from_pretrained(path, actor_cfg, info)
    critic = Critic.from_pretrained(path, critic_cfg, info)   # GAE only
    ref = reference_for(actor, path, actor_cfg, info)          # KL only (LoRA: adapter off)
    batch.set("old_logprobs", actor.compute_logprobs(batch, temperature))
    batch.set("ref_logprobs", ref.compute_logprobs(batch, temperature))
    batch.set("values", critic.compute_values(batch))
    ...  # advantages and returns
    metrics = actor.update(batch, temperature) | critic.update(batch)
    Checkpointer({"actor": actor, "critic": critic}).save(run_dir / "step_000010")
    export_hf(actor.module, run_dir / "export", tokenizer)
"""

from __future__ import annotations

from rlvr.learner.actor import Actor
from rlvr.learner.checkpoint import (
    Checkpointer,
    CheckpointError,
    complete_checkpoints,
    export_adapter,
    export_hf,
    full_state_dict,
    latest_checkpoint,
    prune_checkpoints,
)
from rlvr.learner.config import ActorConfig, CriticConfig, LearnerConfig, OptimConfig
from rlvr.learner.critic import Critic
from rlvr.learner.lora import LoraConfig
from rlvr.learner.modules import CriticModel, load_causal_lm
from rlvr.learner.parallel import DistInfo, apply_fsdp, free_cached_memory, init_distributed
from rlvr.learner.reference import AdapterOffReference, Reference, reference_for
from rlvr.learner.teacher import Teacher

__all__ = [
    "Actor",
    "ActorConfig",
    "AdapterOffReference",
    "Checkpointer",
    "Critic",
    "CriticConfig",
    "CriticModel",
    "DistInfo",
    "LearnerConfig",
    "LoraConfig",
    "OptimConfig",
    "Reference",
    "Teacher",
    "apply_fsdp",
    "export_adapter",
    "export_hf",
    "free_cached_memory",
    "full_state_dict",
    "init_distributed",
    "latest_checkpoint",
    "complete_checkpoints",
    "CheckpointError",
    "load_causal_lm",
    "prune_checkpoints",
    "reference_for",
]
