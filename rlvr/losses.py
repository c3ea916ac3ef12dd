"""Losses of the PPO family, KL estimators and controllers, token logprobs and entropy.

Every per-token tensor is ``(batch, response_len)``; ``response_mask`` is 1 on tokens the model
generated. Values at masked positions (env tokens, padding) never change a loss, an aggregate, a
metric or a gradient, whatever they hold (even inf or NaN: inputs are selected away with
``torch.where`` before any arithmetic, not multiplied by 0, and masked tokens get gradient 0).
Numerics follow verl 0.9.1 ``core_algos`` (reference/algorithms.md):

- PPO clipped surrogate, https://arxiv.org/abs/1707.06347, with clip-higher (``clip_high >
  clip_low``, DAPO https://arxiv.org/abs/2503.14476) and dual clip for negative advantages,
  https://arxiv.org/abs/1912.09729.
- Value loss: clipped squared error around the rollout-time values.
- KL estimators k1/k2/k3 (http://joschu.net/blog/kl-approx.html); the adaptive in-reward KL
  coefficient of Ziegler et al. 2019, https://arxiv.org/abs/1909.08593.
- ``seq-mean-token-sum-norm`` is Dr. GRPO's constant normaliser, https://arxiv.org/abs/2503.20783.

Conventions and deviations from verl, on purpose:

- An all-zero mask aggregates to 0, never NaN (verl gives NaN for some modes). Loss metrics carry
  ``valid_tokens`` (0 says the loss is 0 because nothing was trained on).
- ``seq-mean-*`` modes average over sequences that have at least one valid token.
- Metrics are returned as detached 0-d tensors (no device sync inside the loss); call
  ``float()`` when logging. ``apply_kl_in_reward`` returns floats (its controller needs one).
- ``dual_clip_c=None`` disables the dual clip (verl always applies it).
- Logprobs and entropy are of the temperature-scaled distribution ``softmax(logits / T)``, the
  one the rollout engine sampled from. ``T == 0`` (greedy decoding) is treated as ``T = 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch.utils.checkpoint import checkpoint

from rlvr.advantages import masked_mean
from rlvr.errors import ConfigError, ShapeError, unknown_name

__all__ = [
    "AGG_MODES",
    "KL_KINDS",
    "AdaptiveKLController",
    "FixedKLController",
    "KLController",
    "aggregate",
    "apply_kl_in_reward",
    "entropy_from_logits",
    "kl_loss",
    "kl_penalty",
    "logprobs_from_logits",
    "policy_loss",
    "truncated_is_weights",
    "value_loss",
]

#: Loss aggregation modes accepted by ``aggregate`` (and every loss's ``agg``).
AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

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

_LOG_RATIO_LIMIT = 20.0  # verl clamps log-ratios to [-20, 20] before exp
_K3_LIMIT = 10.0  # verl clamps k3 to [-10, 10]


def _masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` where ``mask`` is non-zero, exactly 0 elsewhere (gradient 0 there)."""
    return torch.where(mask != 0, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _check_same_shape(**tensors: torch.Tensor | None) -> tuple[int, ...]:
    """Raise ``ShapeError`` unless all given tensors share one shape; return it."""
    shapes = {k: tuple(v.shape) for k, v in tensors.items() if v is not None}
    first_name, first = next(iter(shapes.items()))
    for name, shape in shapes.items():
        if shape != first:
            raise ShapeError(f"{name} has shape {shape}; expected {first} like {first_name}")
    return first


# ---------------------------------------------------------------------------- aggregation
def aggregate(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    norm_constant: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar, counting only tokens where ``mask`` is 1.

    Modes (``m`` = mask, ``L`` = loss_mat; "non-empty" = a row with any valid token):

    - ``token-mean``: ``sum(L*m) / sum(m)``.
    - ``token-sum``: ``sum(L*m)``.
    - ``seq-mean-token-sum``: per row ``sum_t(L*m)``, mean over non-empty rows.
    - ``seq-mean-token-mean``: per row ``sum_t(L*m) / (sum_t(m) + 1e-8)``, mean over non-empty
      rows.
    - ``seq-mean-token-sum-norm``: ``seq-mean-token-sum / norm_constant`` (Dr. GRPO).

    Args:
        loss_mat: ``(B, R)`` per-token loss.
        mask: ``(B, R)``, 1 = counted.
        mode: one of ``AGG_MODES``.
        norm_constant: the divisor of ``seq-mean-token-sum-norm``; default ``R``. Keep it
            constant over training (e.g. the max response length).

    Returns:
        A 0-d tensor; 0 when the mask is all zero.

    Raises:
        UnknownNameError: ``mode`` is not in ``AGG_MODES``.
        ShapeError: ``loss_mat`` and ``mask`` differ in shape, or are not 2-D for seq modes.
    """
    if mode not in AGG_MODES:
        raise unknown_name("loss aggregation mode", mode, AGG_MODES)
    _check_same_shape(loss_mat=loss_mat, mask=mask)
    if mode == "token-mean":
        return masked_mean(loss_mat, mask)
    kept = _masked(loss_mat, mask)
    if mode == "token-sum":
        return kept.sum()
    if loss_mat.dim() != 2:
        raise ShapeError(f"{mode} needs (batch, response_len) tensors; got {tuple(loss_mat.shape)}")
    m = mask.to(loss_mat.dtype)
    seq_sum = kept.sum(dim=-1)
    non_empty = m.sum(dim=-1) > 0
    if mode == "seq-mean-token-mean":
        return masked_mean(seq_sum / (m.sum(dim=-1) + 1e-8), non_empty)
    seq_mean = masked_mean(seq_sum, non_empty)
    if mode == "seq-mean-token-sum":
        return seq_mean
    constant = float(loss_mat.shape[-1]) if norm_constant is None else float(norm_constant)
    if constant <= 0:
        raise ConfigError(f"norm_constant must be > 0; got {norm_constant}")
    return seq_mean / constant


# ---------------------------------------------------------------------------- PPO losses
def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = 3.0,
    agg: str = "token-mean",
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate with clip-higher and dual clip (verl's ``vanilla`` loss).

    ``ratio = exp(clamp(logp - old_logp, -20, 20))``;
    ``L = max(-A * ratio, -A * clamp(ratio, 1 - clip_low, 1 + clip_high))``; where ``A < 0``,
    ``L = min(L, -A * dual_clip_c)``; then ``L *= is_weights`` (if given) and aggregated.

    Args:
        logprobs: ``(B, R)`` current policy logprobs (with grad).
        old_logprobs: ``(B, R)`` logprobs of the policy that the advantages refer to.
        advantages: ``(B, R)``.
        response_mask: ``(B, R)``, 1 on trained tokens.
        clip_low: ratio lower clip ``1 - clip_low``, in [0, 1).
        clip_high: ratio upper clip ``1 + clip_high``, >= 0 (clip-higher: > clip_low).
        dual_clip_c: dual-clip constant (> 1) bounding the loss of negative advantages; None
            disables it.
        agg: aggregation mode (``AGG_MODES``).
        is_weights: optional ``(B, R)`` per-token importance weights (e.g. from
            ``truncated_is_weights``), detached and multiplied into the per-token loss.

    Returns:
        ``(loss, metrics)``: ``loss`` is 0-d with grad; ``metrics`` are detached 0-d tensors:
        ``pg_loss``, ``pg_clipfrac`` (fraction of valid tokens where the clipped term won),
        ``pg_clipfrac_lower`` (dual clip engaged), ``ppo_kl`` (``masked_mean(old - new)``),
        ``valid_tokens``.

    Raises:
        ConfigError: a clip parameter is out of range.
        ShapeError: the tensors differ in shape.
    """
    if not 0.0 <= clip_low < 1.0 or clip_high < 0.0:
        raise ConfigError(
            f"clip_low must be in [0, 1) and clip_high >= 0; got {clip_low}, {clip_high}"
        )
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ConfigError(f"dual_clip_c must be > 1 (or None to disable); got {dual_clip_c}")
    _check_same_shape(
        logprobs=logprobs,
        old_logprobs=old_logprobs,
        advantages=advantages,
        response_mask=response_mask,
        is_weights=is_weights,
    )
    # Zero every input on masked tokens first, so that inf/NaN there can reach neither the
    # loss nor the gradient (a NaN times a zero gradient is still NaN).
    logprobs, old_logprobs, advantages = (
        _masked(x, response_mask) for x in (logprobs, old_logprobs, advantages)
    )
    log_ratio = (logprobs - old_logprobs).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    dual_engaged = torch.zeros_like(per_token, dtype=torch.bool)
    if dual_clip_c is not None:
        bound = -advantages * dual_clip_c
        negative = advantages < 0
        dual_engaged = negative & (per_token > bound)
        per_token = torch.where(negative, torch.minimum(per_token, bound), per_token)
    if is_weights is not None:
        per_token = per_token * _masked(is_weights.detach(), response_mask)
    loss = aggregate(per_token, response_mask, agg)
    with torch.no_grad():
        metrics = {
            "pg_loss": loss.detach(),
            "pg_clipfrac": masked_mean((clipped > unclipped).float(), response_mask),
            "pg_clipfrac_lower": masked_mean(dual_engaged.float(), response_mask),
            "ppo_kl": masked_mean(-log_ratio, response_mask),
            "valid_tokens": (response_mask != 0).sum().float(),
        }
    return loss, metrics


def truncated_is_weights(
    old_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    cap: float = 2.0,
) -> torch.Tensor:
    """Truncated importance weights correcting the rollout-engine/learner mismatch.

    ``w = min(exp(old_logprobs - rollout_logprobs), cap)`` (log-ratio clamped to [-20, 20]),
    like verl's token-level ``rollout_is`` weights (truncated IS, https://fengyao.notion.site/
    off-policy-rl). Pass them to ``policy_loss(..., is_weights=w)``.

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
    _check_same_shape(old_logprobs=old_logprobs, rollout_logprobs=rollout_logprobs, mask=mask)
    with torch.no_grad():
        log_w = (old_logprobs - rollout_logprobs).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
        return _masked(torch.exp(log_w).clamp(max=cap), mask)


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
    _check_same_shape(
        values=values, old_values=old_values, returns=returns, response_mask=response_mask
    )
    values, old_values, returns = (_masked(x, response_mask) for x in (values, old_values, returns))
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


# ---------------------------------------------------------------------------- KL
def _kl_value(d: torch.Tensor, kind: str) -> torch.Tensor:
    """The estimator ``kind`` (canonical name) of ``d = logp - ref_logp``."""
    if kind == "k1":
        return d
    if kind == "abs":
        return d.abs()
    if kind == "k2":
        return 0.5 * d.square()
    u = (-d).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
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
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
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
    logprobs, ref_logprobs = (_masked(x, response_mask) for x in (logprobs, ref_logprobs))
    loss = aggregate(kl_penalty(logprobs, ref_logprobs, kind), response_mask, agg)
    return loss, {"kl_loss": loss.detach()}


class KLController(Protocol):
    """The coefficient ``value`` of the in-reward KL penalty and its update rule."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> None:
        """Update ``value`` after a batch of ``n_steps`` sequences whose mean KL was given."""
        ...


class FixedKLController:
    """A constant KL coefficient.

    Args:
        coef: the coefficient beta, >= 0.
    """

    def __init__(self, coef: float) -> None:
        if coef < 0:
            raise ConfigError(f"coef must be >= 0; got {coef}")
        self.value = float(coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op (the coefficient is fixed)."""

    def state_dict(self) -> dict[str, Any]:
        """The controller state, for checkpoints."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``."""
        self.value = float(state["value"])


class AdaptiveKLController:
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
        self.value = float(init_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move ``value`` toward keeping the KL at ``target_kl``."""
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, Any]:
        """The controller state, for checkpoints."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``."""
        self.value = float(state["value"])


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
    """
    _check_same_shape(
        token_level_scores=token_level_scores,
        logprobs=logprobs,
        ref_logprobs=ref_logprobs,
        mask=mask,
    )
    with torch.no_grad():
        kld = _masked(kl_penalty(logprobs, ref_logprobs, kind), mask)
        beta = float(controller.value)
        rewards = token_level_scores - beta * kld
        has_tokens = (mask != 0).any(dim=-1)
        current_kl = float(masked_mean(masked_mean(kld, mask, dim=-1), has_tokens))
    controller.update(current_kl, n_steps=int(token_level_scores.shape[0]))
    return rewards, {"reward_kl_penalty": current_kl, "reward_kl_penalty_coeff": beta}


# ---------------------------------------------------------------------------- logits
_CHUNK_ELEMENTS = 1 << 24  # ~64 MiB of float32 per chunk of rows


def _scaled_temperature(temperature: float) -> float:
    if temperature < 0:
        raise ConfigError(f"temperature must be >= 0; got {temperature}")
    return 1.0 if temperature == 0 else float(temperature)


def _chunk_logprobs(z: torch.Tensor, labels: torch.Tensor, t: float) -> torch.Tensor:
    z = z.float() if t == 1.0 else z.float() / t
    return z.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)


def _chunk_entropy(z: torch.Tensor, t: float) -> torch.Tensor:
    z = z.float() if t == 1.0 else z.float() / t
    p = torch.softmax(z, dim=-1)
    pz = torch.where(p > 0, p * z, torch.zeros((), device=z.device))  # 0 * -inf -> 0, not NaN
    return torch.logsumexp(z, dim=-1) - pz.sum(dim=-1)


def _over_row_chunks(
    fn: Callable[..., torch.Tensor],
    logits: torch.Tensor,
    *rest: torch.Tensor,
    t: float,
    chunk_rows: int | None,
) -> torch.Tensor:
    """Apply ``fn`` to chunks of rows of the flattened logits; checkpoint each chunk under grad.

    Checkpointing keeps only the chunk's input alive for backward (the float32, temperature-
    scaled copy and the softmax are recomputed), so at most one chunk-sized set of vocab-wide
    temporaries exists at a time, with or without grad.
    """
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    flat_rest = [r.reshape(-1) for r in rest]
    step = chunk_rows or max(1, _CHUNK_ELEMENTS // max(vocab, 1))
    use_ckpt = torch.is_grad_enabled() and logits.requires_grad
    outs = []
    for start in range(0, flat.shape[0], step):
        args = [flat[start : start + step], *(r[start : start + step] for r in flat_rest)]
        if use_ckpt:
            outs.append(checkpoint(fn, *args, t, use_reentrant=False))
        else:
            outs.append(fn(*args, t))
    if not outs:
        return flat.new_zeros(0, dtype=torch.float32).reshape(logits.shape[:-1])
    return torch.cat(outs).reshape(logits.shape[:-1])


def logprobs_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    *,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """Log-probability of ``labels`` under ``softmax(logits / temperature)``.

    Computed as ``z[label] - logsumexp(z)`` in float32 over chunks of rows, never
    materialising ``log_softmax`` of the whole tensor (see ``_over_row_chunks``).

    Args:
        logits: ``(..., V)`` any float dtype.
        labels: ``(...)`` int64 token ids.
        temperature: the sampling temperature; 0 (greedy) is treated as 1.
        chunk_rows: rows per chunk; default keeps a chunk near 2**24 elements.

    Returns:
        ``(...)`` float32 logprobs.

    Raises:
        ShapeError: ``labels.shape != logits.shape[:-1]``.
        ConfigError: negative temperature.
    """
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ShapeError(
            f"labels has shape {tuple(labels.shape)}; expected logits.shape[:-1] = "
            f"{tuple(logits.shape[:-1])}"
        )
    t = _scaled_temperature(temperature)
    return _over_row_chunks(_chunk_logprobs, logits, labels, t=t, chunk_rows=chunk_rows)


def entropy_from_logits(
    logits: torch.Tensor, temperature: float = 1.0, *, chunk_rows: int | None = None
) -> torch.Tensor:
    """Entropy of ``softmax(z)``, ``z = logits / temperature``: ``logsumexp(z) - sum(p * z)``.

    Args:
        logits: ``(..., V)`` any float dtype.
        temperature: the sampling temperature; 0 (greedy) is treated as 1.
        chunk_rows: rows per chunk; default keeps a chunk near 2**24 elements.

    Returns:
        ``(...)`` float32 entropies (nats); differentiable.
    """
    t = _scaled_temperature(temperature)
    return _over_row_chunks(_chunk_entropy, logits, t=t, chunk_rows=chunk_rows)
