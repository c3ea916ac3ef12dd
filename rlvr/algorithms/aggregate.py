"""How a per-token loss becomes a scalar (the ``loss_agg`` modes), whole or in parts.

``aggregate`` reduces a ``(batch, response_len)`` loss over the tokens where the mask is 1.
Each mode is a masked sum divided by a normaliser (``normaliser``): the valid tokens, the
non-empty sequences, or nothing. A batch split into parts (micro-batches, ranks) gives the
whole batch's value when each part is aggregated with ``part_mode(mode)`` and weighted by
``part_weights``, its share of the whole batch's normaliser; so no padded width (which differs
between parts) ever enters the loss. ``seq-mean-token-sum-norm`` is Dr. GRPO's constant
normaliser, https://arxiv.org/abs/2503.20783. Numerics follow verl 0.9.1 ``agg_loss``, except
that an all-zero mask aggregates to 0, never NaN, and ``seq-mean-*`` modes average over the
sequences that have at least one valid token.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.masked import check_same_shape, masked, masked_mean
from rlvr.errors import ConfigError, ShapeError, unknown_name

__all__ = ["AGG_MODES", "aggregate", "normaliser", "part_mode", "part_weights"]

#: Loss aggregation modes accepted by ``aggregate`` (and every loss's ``agg``).
AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

_NORM = "seq-mean-token-sum-norm"


def _check_mode(mode: str) -> None:
    if mode not in AGG_MODES:
        raise unknown_name("loss aggregation mode", mode, AGG_MODES)


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
    _check_mode(mode)
    check_same_shape(loss_mat=loss_mat, mask=mask)
    if mode == "token-mean":
        return masked_mean(loss_mat, mask)
    kept = masked(loss_mat, mask)
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


def normaliser(mask: torch.Tensor, mode: str) -> float:
    """What ``mode`` divides its masked sum by on this ``(B, R)`` mask (before any constant).

    Returns:
        The valid tokens (``token-mean``), the non-empty rows (``seq-mean-*``), or 1.0
        (``token-sum``: a sum is not divided).
    """
    _check_mode(mode)
    if mode == "token-mean":
        return float(mask.sum())
    if mode == "token-sum":
        return 1.0
    return float((mask.sum(dim=-1) > 0).sum())


def part_mode(mode: str) -> str:
    """The mode each part of a split batch is aggregated with.

    ``mode`` itself, except ``seq-mean-token-sum`` for ``seq-mean-token-sum-norm``: its
    constant divisor goes into ``part_weights`` (a part's own width must not be the divisor).
    """
    _check_mode(mode)
    return "seq-mean-token-sum" if mode == _NORM else mode


def part_weights(
    mode: str, parts: list[float], total: float, *, norm_constant: float | None = None
) -> list[float]:
    """The weight of each part of a split batch, so that the weighted parts give the whole.

    For a batch ``(L, m)`` split into parts ``(L_i, m_i)``: ``sum_i w_i * aggregate(L_i, m_i,
    part_mode(mode)) == aggregate(L, m, mode, norm_constant=norm_constant)``.

    Args:
        mode: one of ``AGG_MODES``.
        parts: ``normaliser(m_i, mode)`` of each part held here.
        total: the sum of ``normaliser`` over ALL parts of the batch (e.g. over every rank).
        norm_constant: the divisor of ``seq-mean-token-sum-norm`` (> 0); required by it.

    Returns:
        One weight per part: its share ``parts[i] / total`` (0 when ``total`` is 0), 1.0 for
        ``token-sum``, divided by ``norm_constant`` for ``seq-mean-token-sum-norm``.

    Raises:
        ConfigError: ``seq-mean-token-sum-norm`` without a positive ``norm_constant``.
    """
    _check_mode(mode)
    if mode == "token-sum":
        return [1.0] * len(parts)
    shares = [p / total if total > 0 else 0.0 for p in parts]
    if mode != _NORM:
        return shares
    if norm_constant is None or norm_constant <= 0:
        raise ConfigError(f"norm_constant must be > 0 for {_NORM}; got {norm_constant}")
    return [w / float(norm_constant) for w in shares]
