"""Token logprobs and entropy from logits, chunk by chunk of rows, never all logits at once.

Logprobs and entropy are of the temperature-scaled distribution ``softmax(logits / T)``, the
one the rollout engine sampled from; ``T == 0`` (greedy decoding) is treated as ``T = 1``. Both
are computed in float32 over chunks of rows (``CHUNK_ELEMENTS`` logits each), and under grad
each chunk is checkpointed, so at most one chunk-sized set of vocab-wide temporaries exists at
a time. ``rlvr.learner.logprobs`` uses them inside the model's LM head.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

from rlvr.errors import ConfigError, ShapeError
from rlvr.trajectory import logprob_temperature

__all__ = ["CHUNK_ELEMENTS", "entropy_from_logits", "logprobs_from_logits"]

#: Logits per checkpointed chunk (float32: 64 MiB); a chunk is ``CHUNK_ELEMENTS // V`` rows.
CHUNK_ELEMENTS = 1 << 24


def _scaled_temperature(temperature: float) -> float:
    if temperature < 0:
        raise ConfigError(f"temperature must be >= 0; got {temperature}")
    return logprob_temperature(temperature)


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
    step = chunk_rows or max(1, CHUNK_ELEMENTS // max(vocab, 1))
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
