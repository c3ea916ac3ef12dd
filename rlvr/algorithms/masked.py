"""Per-token tensors under a mask: selection, shape checks and masked statistics.

Every per-token tensor is ``(batch, response_len)`` and ``mask`` is 1 on tokens the model
generated (counted), 0 on env/tool tokens and padding. Values at masked positions never reach a
result, whatever they hold (even inf or NaN): they are selected away with ``torch.where``
before any arithmetic, not multiplied by 0. The statistics follow verl 0.9.1 ``core_algos``
(``masked_mean``, ``masked_var``, ``masked_whiten``; docs/algorithms.md), except that an
all-zero mask gives a mean of 0, not NaN.
"""

from __future__ import annotations

import torch

from rlvr.errors import InsufficientDataError, ShapeError

__all__ = ["check_same_shape", "masked", "masked_mean", "masked_var", "masked_whiten"]

_VAR_EPS = 1e-8  # verl: rsqrt(var + 1e-8) in masked_whiten, sum(mask) + 1e-8 in masked_mean


def masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` where ``mask`` is non-zero, exactly 0 elsewhere (gradient 0 there)."""
    return torch.where(mask != 0, x, torch.zeros((), dtype=x.dtype, device=x.device))


def check_same_shape(**tensors: torch.Tensor | None) -> tuple[int, ...]:
    """Raise ``ShapeError`` unless all given (non-None) tensors share one shape; return it."""
    shapes = {k: tuple(v.shape) for k, v in tensors.items() if v is not None}
    first_name, first = next(iter(shapes.items()))
    for name, shape in shapes.items():
        if shape != first:
            raise ShapeError(f"{name} has shape {shape}; expected {first} like {first_name}")
    return first


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1: ``sum(x * m) / (sum(m) + 1e-8)``.

    Args:
        values: any shape.
        mask: same shape; 1 = counted, 0 = ignored (whatever ``values`` holds there, even inf).
        dim: reduce over this dim only; None reduces over everything.

    Returns:
        A 0-d tensor (or the reduced shape). An all-zero mask gives 0, not NaN.
    """
    m = mask.to(values.dtype)
    kept = torch.where(m != 0, values, torch.zeros((), dtype=values.dtype, device=values.device))
    if dim is None:
        return (kept * m).sum() / (m.sum() + _VAR_EPS)
    return (kept * m).sum(dim) / (m.sum(dim) + _VAR_EPS)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``values`` where ``mask`` is 1, over all elements.

    Args:
        values: any shape.
        mask: same shape, 0/1.
        unbiased: apply Bessel's correction ``n / (n - 1)`` (verl always does).

    Returns:
        A 0-d tensor.

    Raises:
        InsufficientDataError: ``sum(mask)`` is 0 or 1 (the unbiased variance is undefined).
    """
    n = float(mask.sum())
    if n < 2:
        raise InsufficientDataError(
            f"masked_var needs at least 2 unmasked elements; sum(mask) is {n:g}"
        )
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    return var * (n / (n - 1)) if unbiased else var


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True
) -> torch.Tensor:
    """Normalise ``values`` to zero mean, unit variance using the statistics under ``mask``.

    Args:
        values: any shape.
        mask: same shape, 0/1; at least two ones.
        shift_mean: if False, the mean is added back (only the scale changes).

    Returns:
        ``(values - mean) * rsqrt(var + 1e-8)`` (plus ``mean`` if not ``shift_mean``), same
        shape; masked positions are transformed too (callers multiply by the mask if needed).

    Raises:
        InsufficientDataError: fewer than two unmasked elements.
    """
    var = masked_var(values, mask)
    mean = masked_mean(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + _VAR_EPS)
    return whitened + mean if not shift_mean else whitened
