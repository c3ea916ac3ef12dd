"""The FSDP2 learner: actor, critic and reference models, their updates and checkpoints.

Typical use (stage B and C of a training step)::

    info = init_distributed()                       # world size 1 without torchrun
    actor = Actor.from_pretrained(path, actor_cfg, info)
    critic = Critic.from_pretrained(path, critic_cfg, info)   # GAE only
    ref = Reference.from_pretrained(path, actor_cfg, info)     # KL only
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
    export_hf,
    full_state_dict,
    latest_checkpoint,
    prune_checkpoints,
)
from rlvr.learner.config import ActorConfig, CriticConfig, LearnerConfig, OptimConfig
from rlvr.learner.critic import Critic
from rlvr.learner.modules import CriticModel, load_causal_lm
from rlvr.learner.parallel import DistInfo, apply_fsdp, init_distributed
from rlvr.learner.reference import Reference
from rlvr.learner.teacher import Teacher

__all__ = [
    "Actor",
    "ActorConfig",
    "Checkpointer",
    "Critic",
    "CriticConfig",
    "CriticModel",
    "DistInfo",
    "LearnerConfig",
    "OptimConfig",
    "Reference",
    "Teacher",
    "apply_fsdp",
    "export_hf",
    "full_state_dict",
    "init_distributed",
    "latest_checkpoint",
    "load_causal_lm",
    "prune_checkpoints",
]
