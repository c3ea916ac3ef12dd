"""The tensor math of RL on language models: advantages, policy/value losses, KL, aggregation.

Pure functions and registries over tensors; nothing here knows about trainers, engines, configs
or files (an import contract checks it). Each module cites the paper it implements and matches
verl 0.9.1's numerics where verl has the same estimator or loss.

- ``advantages``: GAE, GRPO, Dr. GRPO, RLOO, REINFORCE++ (the ``ADVANTAGE_ESTIMATORS`` registry);
- ``losses``: PPO clip, GSPO, CISPO, value loss (``POLICY_LOSSES``);
- ``kl``: KL estimators, the adaptive controller;
- ``aggregate``: token/sequence loss aggregation modes;
- ``masked``: masked means/whitening;
- ``decoupled_ppo``: the decoupled objective for stale rollouts (AReaL);
- ``distill``: on-policy distillation's reverse KL to a teacher;
- ``registry``: the typed name -> implementation registries users extend.
"""

from rlvr.algorithms.advantages import ADVANTAGE_ESTIMATORS, AdvantageInputs, register_estimator
from rlvr.algorithms.losses import POLICY_LOSSES, PolicyLossInputs, register_policy_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "POLICY_LOSSES",
    "AdvantageInputs",
    "PolicyLossInputs",
    "register_estimator",
    "register_policy_loss",
]
