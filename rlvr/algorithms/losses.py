"""Losses of the PPO family: one registry of policy losses, the value loss, truncated IS weights.

Every per-token tensor is ``(batch, response_len)``; ``response_mask`` is 1 on tokens the model
generated. Values at masked positions (env tokens, padding) never change a loss, a metric or a
gradient, whatever they hold (even inf or NaN: inputs are selected away with ``torch.where``
before any arithmetic, not multiplied by 0, and masked tokens get gradient 0).
Numerics follow verl 0.9.1 ``core_algos`` (docs/algorithms.md):

- ``vanilla`` policy loss: the PPO clipped surrogate, https://arxiv.org/abs/1707.06347, with
  clip-higher (``clip_high > clip_low``, DAPO https://arxiv.org/abs/2503.14476) and dual clip
  for negative advantages, https://arxiv.org/abs/1912.09729.
- ``gspo`` policy loss: GSPO's sequence-level ratio, https://arxiv.org/abs/2507.18071.
- ``cispo`` policy loss: CISPO's clipped, detached IS weight times the log-probability,
  https://arxiv.org/abs/2506.13585.
- Value loss: clipped squared error around the rollout-time values.

A policy loss is one function over ``PolicyLossInputs`` registered by name
(``@register_policy_loss("name")``); the actor calls the one its config names
(``learner.policy_loss``), so a new loss never edits the actor. KL terms are in
``rlvr.algorithms.kl``, the aggregation modes in ``rlvr.algorithms.aggregate``, token logprobs and
entropy from logits in ``rlvr.learner.logits``.

Conventions and deviations from verl, on purpose:

- Loss metrics carry ``valid_tokens`` (0 says the loss is 0 because nothing was trained on).
- Metrics are returned as detached 0-d tensors (no device sync inside the loss); call
  ``float()`` when logging.
- ``dual_clip_c=None`` disables the dual clip (verl always applies it). ``gspo`` and
  ``cispo`` have no dual clip (as in verl and their papers): they ignore ``dual_clip_c``.
- ``gspo`` aggregates with the configured mode, as verl 0.9.1 does; the paper's objective is
  ``seq-mean-token-mean`` (set ``actor.loss_agg`` to it to follow the paper).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlvr.algorithms.aggregate import aggregate
from rlvr.algorithms.kl import LOG_RATIO_LIMIT
from rlvr.algorithms.masked import check_same_shape, masked, masked_mean
from rlvr.algorithms.registry import Registry
from rlvr.errors import ConfigError, ShapeError

__all__ = [
    "POLICY_LOSSES",
    "PolicyLoss",
    "PolicyLossFn",
    "PolicyLossInputs",
    "cispo_loss",
    "gspo_loss",
    "ppo_clip_loss",
    "register_policy_loss",
    "truncated_is_weights",
    "value_loss",
]


@dataclass(frozen=True)
class PolicyLossInputs:
    """What every policy loss reads: the batch tensors and the clip parameters.

    Attributes:
        logprobs: ``(B, R)`` current policy logprobs (with grad).
        old_logprobs: ``(B, R)`` logprobs of the policy that the advantages refer to.
        advantages: ``(B, R)``.
        response_mask: ``(B, R)``, 1 on trained tokens.
        is_weights: optional ``(B, R)`` per-token importance weights (e.g. from
            ``truncated_is_weights``), detached and multiplied into the per-token loss.
        clip_low: ratio lower clip ``1 - clip_low``, in [0, 1).
        clip_high: ratio upper clip ``1 + clip_high``, >= 0 (clip-higher: > clip_low).
        dual_clip_c: dual-clip constant (> 1) bounding the loss of negative advantages; None
            disables it.
        agg: aggregation mode (``rlvr.algorithms.aggregate.AGG_MODES``).

    Raises:
        ConfigError: a clip parameter is out of range.
        ShapeError: the tensors differ in shape.
    """

    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    response_mask: torch.Tensor
    is_weights: torch.Tensor | None = None
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip_c: float | None = 3.0
    agg: str = "token-mean"

    def __post_init__(self) -> None:
        if not 0.0 <= self.clip_low < 1.0 or self.clip_high < 0.0:
            raise ConfigError(
                f"clip_low must be in [0, 1) and clip_high >= 0; got {self.clip_low}, "
                f"{self.clip_high}"
            )
        if self.dual_clip_c is not None and self.dual_clip_c <= 1.0:
            raise ConfigError(
                f"dual_clip_c must be > 1 (or None to disable); got {self.dual_clip_c}"
            )
        check_same_shape(
            logprobs=self.logprobs,
            old_logprobs=self.old_logprobs,
            advantages=self.advantages,
            response_mask=self.response_mask,
            is_weights=self.is_weights,
        )


#: A policy loss: ``(loss, metrics)``; ``loss`` is 0-d with grad (aggregated with ``x.agg``),
#: ``metrics`` are detached 0-d tensors (``pg_loss``, ``valid_tokens`` and the loss's own).
PolicyLossFn = Callable[[PolicyLossInputs], tuple[torch.Tensor, dict[str, torch.Tensor]]]


@dataclass(frozen=True)
class PolicyLoss:
    """A registered policy loss.

    Attributes:
        name: the registry key (what ``learner.policy_loss`` says).
        fn: the loss.
        paper: a link to the method's paper.
    """

    name: str
    fn: PolicyLossFn
    paper: str = ""


#: name -> PolicyLoss. ``POLICY_LOSSES[name]`` finds one (``UnknownNameError`` with close
#: matches if not registered); ``POLICY_LOSSES.remove(name)`` restores the registry in tests.
POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")

#: GSPO's bound on the (sequence) log-ratio before ``exp`` (verl's ``clamp(max=10)``).
GSPO_LOG_RATIO_MAX = 10.0


def register_policy_loss(name: str, *, paper: str = "") -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: register a ``PolicyLossFn`` under ``name`` (returned unchanged).

    Raises:
        DuplicateNameError: ``name`` is already registered (unregister it first).
    """

    def decorator(fn: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSSES.add(name, PolicyLoss(name, fn, paper))
        return fn

    return decorator


def _weighted_loss(per_token: torch.Tensor, x: PolicyLossInputs, log_ratio: torch.Tensor,
                   clipped: torch.Tensor, **fractions: torch.Tensor,
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped losses' common end: weighted, aggregated, with their metrics.

    ``per_token`` times ``x.is_weights`` (if given), aggregated with ``x.agg``; metrics:
    ``pg_loss``, ``pg_clipfrac`` (the valid tokens' fraction where ``clipped``), each of
    ``fractions`` the same way, ``ppo_kl`` (``masked_mean(old - new)``), ``valid_tokens``.
    """
    mask = x.response_mask
    if x.is_weights is not None:
        per_token = per_token * masked(x.is_weights.detach(), mask)
    loss = aggregate(per_token, mask, x.agg)
    with torch.no_grad():
        metrics = {"pg_loss": loss.detach(), "pg_clipfrac": masked_mean(clipped.float(), mask)}
        metrics |= {name: masked_mean(where.float(), mask) for name, where in fractions.items()}
        metrics |= {"ppo_kl": masked_mean(-log_ratio, mask),
                    "valid_tokens": (mask != 0).sum().float()}
    return loss, metrics


@register_policy_loss("vanilla", paper="https://arxiv.org/abs/1707.06347")
def ppo_clip_loss(x: PolicyLossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate with clip-higher and dual clip (verl's ``vanilla`` loss).

    ``ratio = exp(clamp(logp - old_logp, -20, 20))``;
    ``L = max(-A * ratio, -A * clamp(ratio, 1 - clip_low, 1 + clip_high))``; where ``A < 0``,
    ``L = min(L, -A * dual_clip_c)``; then ``L *= is_weights`` (if given) and aggregated.

    Returns:
        ``(loss, metrics)``: ``loss`` is 0-d with grad; ``metrics`` are detached 0-d tensors:
        ``pg_loss``, ``pg_clipfrac`` (fraction of valid tokens where the clipped term won),
        ``pg_clipfrac_lower`` (dual clip engaged), ``ppo_kl`` (``masked_mean(old - new)``),
        ``valid_tokens``.
    """
    mask = x.response_mask
    # Zero every input on masked tokens first, so that inf/NaN there can reach neither the
    # loss nor the gradient (a NaN times a zero gradient is still NaN).
    logprobs, old_logprobs, advantages = (
        masked(t, mask) for t in (x.logprobs, x.old_logprobs, x.advantages)
    )
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - x.clip_low, 1.0 + x.clip_high)
    per_token = torch.maximum(unclipped, clipped)
    dual_engaged = torch.zeros_like(per_token, dtype=torch.bool)
    if x.dual_clip_c is not None:
        bound = -advantages * x.dual_clip_c
        negative = advantages < 0
        dual_engaged = negative & (per_token > bound)
        per_token = torch.where(negative, torch.minimum(per_token, bound), per_token)
    return _weighted_loss(per_token, x, log_ratio, clipped > unclipped,
                          pg_clipfrac_lower=dual_engaged)


@register_policy_loss("gspo", paper="https://arxiv.org/abs/2507.18071")
def gspo_loss(x: PolicyLossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO: PPO's clip on the sequence's length-normalised ratio (Qwen's GSPO, verl's ``gspo``).

    ``s_i = exp(mean_t(logp - old_logp))`` over the sequence's valid tokens, used per token as
    ``s_i,t = sg(s_i) * exp(logp_t - sg(logp_t))`` (the value of ``s_i``, the gradient of
    ``s_i`` times ``logp_t``'s), log clamped to at most 10;
    ``L = max(-A * s_i,t, -A * clamp(s_i,t, 1 - clip_low, 1 + clip_high))``, times
    ``is_weights`` (if given), aggregated with ``x.agg`` (the paper: ``seq-mean-token-mean``).
    A whole sequence is clipped or not: tokens of one response share its ratio.

    Returns:
        ``(loss, metrics)``: ``pg_loss``, ``pg_clipfrac`` (fraction of valid tokens where the
        clipped term won), ``ppo_kl`` (``masked_mean(old - new)``), ``valid_tokens``.

    Raises:
        ShapeError: the tensors are not ``(B, R)`` (a ratio per row needs rows).
    """
    mask = x.response_mask
    if mask.dim() != 2:
        raise ShapeError(f"gspo needs (batch, response_len) tensors; got {tuple(mask.shape)}")
    logprobs, old_logprobs, advantages = (
        masked(t, mask) for t in (x.logprobs, x.old_logprobs, x.advantages)
    )
    log_ratio = logprobs - old_logprobs
    lengths = (mask != 0).sum(-1).clamp(min=1).to(log_ratio.dtype)
    seq_log_ratio = log_ratio.sum(-1) / lengths
    token_log_ratio = logprobs - logprobs.detach() + seq_log_ratio.detach()[:, None]
    ratio = torch.exp(token_log_ratio.clamp(max=GSPO_LOG_RATIO_MAX))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - x.clip_low, 1.0 + x.clip_high)
    per_token = torch.maximum(unclipped, clipped)
    return _weighted_loss(per_token, x, log_ratio, clipped > unclipped)


@register_policy_loss("cispo", paper="https://arxiv.org/abs/2506.13585")
def cispo_loss(x: PolicyLossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO: REINFORCE with a clipped, detached IS weight (MiniMax-M1, verl's ``cispo``).

    ``ratio = exp(clamp(logp - old_logp, -20, 20))``;
    ``L = -sg(clamp(ratio, 1 - clip_low, 1 + clip_high)) * A * logp``, times ``is_weights``
    (if given), aggregated with ``x.agg``. Unlike PPO's clip, which drops the gradient of
    tokens whose ratio left the trust region, every token keeps its gradient (through
    ``logp``); only its weight is bounded. The loss's value is therefore not PPO's (it holds
    ``logp``), only its gradient is comparable.

    Returns:
        ``(loss, metrics)``: ``pg_loss``, ``pg_clipfrac`` (fraction of valid tokens whose
        weight was clipped), ``ppo_kl`` (``masked_mean(old - new)``), ``valid_tokens``.
    """
    mask = x.response_mask
    logprobs, old_logprobs, advantages = (
        masked(t, mask) for t in (x.logprobs, x.old_logprobs, x.advantages)
    )
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    with torch.no_grad():
        ratio = torch.exp(log_ratio)
        weight = ratio.clamp(1.0 - x.clip_low, 1.0 + x.clip_high)
    per_token = -weight * advantages * logprobs
    return _weighted_loss(per_token, x, log_ratio, weight != ratio)


def truncated_is_weights(
    old_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    cap: float = 2.0,
) -> torch.Tensor:
    """Truncated importance weights correcting the rollout-engine/learner mismatch.

    ``w = min(exp(old_logprobs - rollout_logprobs), cap)`` (log-ratio clamped to [-20, 20]),
    like verl's token-level ``rollout_is`` weights (truncated IS, https://fengyao.notion.site/
    off-policy-rl). Pass them to ``PolicyLossInputs(..., is_weights=w)``.

    Args:
        old_logprobs: ``(B, R)`` learner logprobs before the update.
        rollout_logprobs: ``(B, R)`` the engine's logprobs of the same tokens.
        mask: ``(B, R)``, 1 on model tokens.
        cap: upper bound of a weight, > 0.

    Returns:
        ``(B, R)`` detached weights, 0 where the mask is 0.

    Raises:
        ConfigError: ``cap <= 0``.
    """
    if cap <= 0:
        raise ConfigError(f"cap must be > 0; got {cap}")
    check_same_shape(old_logprobs=old_logprobs, rollout_logprobs=rollout_logprobs, mask=mask)
    with torch.no_grad():
        log_w = (old_logprobs - rollout_logprobs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
        return masked(torch.exp(log_w).clamp(max=cap), mask)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    clip: float = 0.5,
    agg: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss: ``0.5 * agg(max((v - R)^2, (clamp(v, old - c, old + c) - R)^2))``.

    Args:
        values: ``(B, R)`` current critic values (with grad).
        old_values: ``(B, R)`` critic values at rollout time (``batch.values``).
        returns: ``(B, R)`` targets from the advantage estimator.
        response_mask: ``(B, R)``.
        clip: ``cliprange_value`` c, > 0.
        agg: aggregation mode (``AGG_MODES``).

    Returns:
        ``(loss, metrics)``; metrics (detached 0-d): ``vf_loss``, ``vf_clipfrac`` (fraction of
        valid tokens where the clipped error was larger), ``valid_tokens``.

    Raises:
        ConfigError: ``clip <= 0``.
    """
    if clip <= 0:
        raise ConfigError(f"clip must be > 0; got {clip}")
    check_same_shape(
        values=values, old_values=old_values, returns=returns, response_mask=response_mask
    )
    values, old_values, returns = (masked(x, response_mask) for x in (values, old_values, returns))
    clipped_values = torch.clamp(values, old_values - clip, old_values + clip)
    err = (values - returns) ** 2
    err_clipped = (clipped_values - returns) ** 2
    loss = 0.5 * aggregate(torch.maximum(err, err_clipped), response_mask, agg)
    with torch.no_grad():
        metrics = {
            "vf_loss": loss.detach(),
            "vf_clipfrac": masked_mean((err_clipped > err).float(), response_mask),
            "valid_tokens": (response_mask != 0).sum().float(),
        }
    return loss, metrics
