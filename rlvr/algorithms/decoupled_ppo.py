"""Decoupled PPO, the off-policy objective of asynchronous RL (``rollout.max_staleness >= 1``).

AReaL (Fu et al. 2025, "AReaL: A Large-Scale Asynchronous Reinforcement Learning System for
Language Reasoning", https://arxiv.org/abs/2505.24298, eq. 5) separates two policies that
synchronous PPO identifies: the behaviour policy ``pi_behav`` that sampled the tokens (here the
rollout engine, possibly some versions old: ``rollout_logprobs``) and the proximal policy
``pi_prox`` the update's trust region is centred on (the learner's weights at the start of the
update: the ``old_logprobs``, from stage B or, in a one-step update, from the update's own
forward before its step: the same numbers, see ``rlvr.learner.actor``). Per model token,
with ``pi_theta`` the policy being trained and ``A`` the advantage:

    r = pi_theta / pi_prox                                   (the PPO ratio, to the proximal)
    w = min(pi_prox / pi_behav, tis_cap)                     (behaviour weight, no gradient)
    L = w * max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))
    L = min(L, -A * dual_clip_c * w) where A < 0             (dual clip, when on)

aggregated over the batch with ``loss_agg``; the objective maximised is ``-L``. This is
``rlvr.algorithms.losses.ppo_clip_loss`` (the ``vanilla`` policy loss) with ``is_weights =
truncated_is_weights(old_logprobs, rollout_logprobs, mask, tis_cap)``, which is what
``rlvr.learner.Actor`` computes when ``actor.tis_cap`` is set (old logprobs from stage B or
from the one-step update's own forward); ``decoupled_ppo_loss`` states it in one call (tests
hold the two to the same numbers).

Deviation from AReaL, on purpose: AReaL masks tokens whose behaviour weight exceeds its cap
(``behav_imp_weight_cap``); rlvr truncates the weight at the cap (truncated importance sampling,
as its engine/learner mismatch correction), so such tokens still train, at weight ``tis_cap``.

With ``max_staleness = 0`` and an engine in sync, ``pi_behav = pi_prox`` up to float rounding,
``w = 1`` and the loss is PPO's: the synchronous numbers are unchanged.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.losses import PolicyLossInputs, ppo_clip_loss, truncated_is_weights

PAPER = "https://arxiv.org/abs/2505.24298"


def decoupled_ppo_loss(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    tis_cap: float = 2.0,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = 3.0,
    agg: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The decoupled PPO loss of the module docstring.

    Args:
        logprobs: ``(B, R)`` the trained policy's logprobs (with grad).
        proximal_logprobs: ``(B, R)`` the learner's logprobs before the update.
        behaviour_logprobs: ``(B, R)`` the engine's logprobs of the sampled tokens.
        advantages: ``(B, R)``.
        response_mask: ``(B, R)``, 1 on trained tokens.
        tis_cap: the cap of the behaviour weight, > 0.
        clip_low: ratio lower clip, in [0, 1).
        clip_high: ratio upper clip, >= 0.
        dual_clip_c: the dual clip (> 1) or None.
        agg: aggregation mode (``rlvr.algorithms.aggregate.AGG_MODES``).

    Returns:
        ``(loss, metrics)`` as ``ppo_clip_loss``, plus ``behaviour_weight_mean`` (token mean of
        ``w``).

    Raises:
        ConfigError: a cap or clip out of range.
        ShapeError: the tensors differ in shape.
    """
    weights = truncated_is_weights(proximal_logprobs, behaviour_logprobs, response_mask, tis_cap)
    loss, metrics = ppo_clip_loss(PolicyLossInputs(
        logprobs, proximal_logprobs, advantages, response_mask, is_weights=weights,
        clip_low=clip_low, clip_high=clip_high, dual_clip_c=dual_clip_c, agg=agg,
    ))
    mask = response_mask != 0
    metrics["behaviour_weight_mean"] = weights[mask].mean() if bool(mask.any()) \
        else weights.new_zeros(())
    return loss, metrics


__all__ = ["PAPER", "decoupled_ppo_loss"]
