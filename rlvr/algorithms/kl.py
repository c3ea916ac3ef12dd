"""KL to the reference policy: per-token estimators, the KL loss term, the in-reward penalty.

- Estimators k1/k2/k3 (http://joschu.net/blog/kl-approx.html), by name (``KL_KINDS``), with a
  straight-through variant (``k3+``: k3's value, k2's gradient).
- ``kl_loss``: the KL-as-loss term (verl's ``use_kl_loss``), aggregated like the policy loss.
- ``apply_kl_in_reward``: the penalty subtracted from the token scores, with a fixed or the
  adaptive coefficient of Ziegler et al. 2019 (https://arxiv.org/abs/1909.08593), built by
  ``build_controller``.

Numerics follow verl 0.9.1 ``core_algos.kl_penalty`` and ``apply_kl_penalty``
(docs/algorithms.md); where they deviate, the function says so.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algorithms.aggregate import aggregate
from rlvr.algorithms.masked import check_same_shape, masked, masked_mean
from rlvr.errors import ConfigError, unknown_name

__all__ = [
    "KL_CONTROLLERS",
    "KL_KINDS",
    "LOG_RATIO_LIMIT",
    "AdaptiveKLController",
    "FixedKLController",
    "KLController",
    "apply_kl_in_reward",
    "build_controller",
    "kl_loss",
    "kl_penalty",
]

#: KL estimator names (aliases map to k1/abs/k2/k3); add "+" for k2's gradient (straight-through).
KL_KINDS: dict[str, str] = {
    "k1": "k1",
    "kl": "k1",
    "abs": "abs",
    "k2": "k2",
    "mse": "k2",
    "k3": "k3",
    "low_var_kl": "k3",
}

#: The in-reward KL coefficient controllers ``build_controller`` knows.
KL_CONTROLLERS: tuple[str, ...] = ("fixed", "adaptive")

#: verl clamps log-ratios to [-20, 20] before ``exp`` (here and in ``rlvr.algorithms.losses``).
LOG_RATIO_LIMIT = 20.0
_K3_LIMIT = 10.0  # verl clamps k3 to [-10, 10]


def _kl_value(d: torch.Tensor, kind: str) -> torch.Tensor:
    """The estimator ``kind`` (canonical name) of ``d = logp - ref_logp``."""
    if kind == "k1":
        return d
    if kind == "abs":
        return d.abs()
    if kind == "k2":
        return 0.5 * d.square()
    u = (-d).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return (torch.exp(u) - u - 1.0).clamp(-_K3_LIMIT, _K3_LIMIT)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference, ``d = logp - ref_logp``.

    Kinds: ``k1``/``kl``: ``d``; ``abs``: ``|d|``; ``k2``/``mse``: ``d^2 / 2``;
    ``k3``/``low_var_kl``: ``clamp(exp(u) - u - 1, -10, 10)`` with ``u = clamp(-d, -20, 20)``.
    A trailing ``+`` (e.g. ``k3+``) gives that estimator's value with k2's gradient
    (straight-through; k2's gradient is unbiased for the KL gradient).

    Args:
        logprobs: ``(B, R)`` (or any shape) policy logprobs.
        ref_logprobs: same shape, reference policy logprobs.
        kind: a key of ``KL_KINDS``, optionally followed by ``+``.

    Returns:
        The per-token estimate, same shape, unmasked (mask it or pass it to ``aggregate``).

    Raises:
        UnknownNameError: unknown ``kind`` (the message lists the allowed ones).
    """
    straight_through = kind.endswith("+")
    base = kind[:-1] if straight_through else kind
    if base not in KL_KINDS:
        allowed = list(KL_KINDS) + [k + "+" for k in KL_KINDS]
        raise unknown_name("KL estimator", kind, allowed)
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    d = logprobs - ref_logprobs
    value = _kl_value(d, KL_KINDS[base])
    if not straight_through:
        return value
    k2 = _kl_value(d, "k2")
    return value.detach() + (k2 - k2.detach())


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    kind: str = "low_var_kl",
    agg: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL-as-loss term ``agg(kl_penalty(logprobs, ref_logprobs, kind))`` (scale it yourself).

    Returns:
        ``(loss, {"kl_loss": detached loss})``; the caller adds ``kl_coef * loss``.
    """
    logprobs, ref_logprobs = (masked(x, response_mask) for x in (logprobs, ref_logprobs))
    loss = aggregate(kl_penalty(logprobs, ref_logprobs, kind), response_mask, agg)
    return loss, {"kl_loss": loss.detach()}


class KLController:
    """The coefficient ``value`` of the in-reward KL penalty, its update rule and its state.

    Args:
        value: the (initial) coefficient beta.
    """

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Update ``value`` after a batch of ``n_steps`` sequences whose mean KL was given."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The controller state, for checkpoints."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``."""
        self.value = float(state["value"])


class FixedKLController(KLController):
    """A constant KL coefficient.

    Args:
        coef: the coefficient beta, >= 0.
    """

    def __init__(self, coef: float) -> None:
        if coef < 0:
            raise ConfigError(f"coef must be >= 0; got {coef}")
        super().__init__(coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op (the coefficient is fixed)."""


class AdaptiveKLController(KLController):
    """Proportional KL controller of Ziegler et al. 2019 (https://arxiv.org/abs/1909.08593).

    After each batch: ``e = clip(current_kl / target_kl - 1, -0.2, 0.2)``,
    ``value *= 1 + e * n_steps / horizon``.

    Args:
        init_coef: initial coefficient, >= 0.
        target_kl: the KL to steer to, > 0.
        horizon: number of sequences over which the error is corrected, > 0.
    """

    def __init__(self, init_coef: float, target_kl: float, horizon: int) -> None:
        if init_coef < 0 or target_kl <= 0 or horizon <= 0:
            raise ConfigError(
                "init_coef must be >= 0, target_kl > 0 and horizon > 0; "
                f"got {init_coef}, {target_kl}, {horizon}"
            )
        super().__init__(init_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move ``value`` toward keeping the KL at ``target_kl``."""
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def build_controller(
    kind: str, coef: float, target_kl: float = 0.1, horizon: int = 10_000
) -> KLController:
    """The in-reward KL controller ``kind`` (one of ``KL_CONTROLLERS``).

    Args:
        kind: ``fixed`` (``coef`` throughout) or ``adaptive`` (starts at ``coef``, steers the
            KL to ``target_kl`` over ``horizon`` sequences).
        coef: the (initial) coefficient, >= 0.
        target_kl: the adaptive controller's target, > 0.
        horizon: the adaptive controller's horizon in sequences, > 0.

    Raises:
        UnknownNameError: ``kind`` is not in ``KL_CONTROLLERS``.
        ConfigError: a parameter is out of range.
    """
    if kind == "adaptive":
        return AdaptiveKLController(coef, target_kl, horizon)
    if kind == "fixed":
        return FixedKLController(coef)
    raise unknown_name("KL controller", kind, KL_CONTROLLERS)


def apply_kl_in_reward(
    token_level_scores: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    controller: KLController,
    kind: str = "k1",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Subtract the per-token KL penalty from the scores, then update the controller.

    ``rewards = scores - beta * kl * mask`` with ``beta = controller.value`` before the update;
    the controller then sees ``current_kl`` = the mean over sequences of each sequence's
    masked-mean KL, and ``n_steps`` = the batch size (as verl's ``apply_kl_penalty``). Rows
    without any mask-1 token (env-error rows) are left out of that mean; verl counts them as 0.

    Args:
        token_level_scores: ``(B, R)``.
        logprobs: ``(B, R)`` policy logprobs (verl uses ``old_logprobs``).
        ref_logprobs: ``(B, R)``.
        mask: ``(B, R)``.
        controller: ``FixedKLController`` or ``AdaptiveKLController``.
        kind: KL estimator (``kl_penalty``); verl's default is ``k1``.

    Returns:
        ``(token_level_rewards, metrics)``: detached ``(B, R)`` rewards; metrics (floats)
        ``reward_kl_penalty`` (the current KL) and ``reward_kl_penalty_coeff`` (beta used).
        They are floats, not tensors: the controller needs a number.
    """
    check_same_shape(
        token_level_scores=token_level_scores,
        logprobs=logprobs,
        ref_logprobs=ref_logprobs,
        mask=mask,
    )
    with torch.no_grad():
        kld = masked(kl_penalty(logprobs, ref_logprobs, kind), mask)
        beta = float(controller.value)
        rewards = token_level_scores - beta * kld
        has_tokens = (mask != 0).any(dim=-1)
        current_kl = float(masked_mean(masked_mean(kld, mask, dim=-1), has_tokens))
    controller.update(current_kl, n_steps=int(token_level_scores.shape[0]))
    return rewards, {"reward_kl_penalty": current_kl, "reward_kl_penalty_coeff": beta}
