"""Forward passes over the response span: token logprobs, entropy and values per micro-batch.

In a ``RolloutBatch`` the logits at column ``t`` predict the token at ``t + 1``, so the response
token ``responses[:, j]`` (column ``P + j``) is scored by the logits of column ``P + j - 1``.

Only the response span is projected to the vocabulary: the model is called with
``logits_to_keep`` = the response-predicting columns, so the single vocab-sized buffer is
``(micro_batch, response_len, V)``; ``rlvr.losses.logprobs_from_logits`` and
``entropy_from_logits`` then reduce it in row chunks without another full-size copy. Before the
forward, each micro-batch is cropped to the columns some row actually uses (the common left
padding of the prompts and the common right padding of the responses), which changes nothing
but the cost: padding is masked out of attention and position ids are explicit.

Shared prompts: GRPO-style batches hold each prompt ``group_size`` times. When rows of a
micro-batch share their (windowed) prompt, ``policy_forward`` runs each distinct prompt once with
a KV cache, gathers the cache rows back to one per row (a differentiable index, so gradients of
every row reach the shared prompt activations), and runs only the response columns on top. The
logprobs equal the row-by-row forward's (the same attention over the same keys); the gradient is
the same sum, accumulated in the shared activations. Activation checkpointing (which turns the
KV cache off in training) and micro-batches without repeated prompts use the plain forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rlvr.data import RolloutBatch
from rlvr.hf_compat import activation_checkpointing_on, cache_kwargs
from rlvr.losses import entropy_from_logits, logprobs_from_logits


def micro_batches(batch: RolloutBatch, size: int) -> list[RolloutBatch]:
    """Consecutive slices of ``size`` rows (the last one may be smaller), same ``P`` and ``R``."""
    n = len(batch)
    return [batch.select(list(range(s, min(s + size, n)))) for s in range(0, n, size)]


@dataclass(frozen=True)
class _Window:
    """The columns of a micro-batch fed to the model.

    Attributes:
        start: first input column fed (<= P - 1).
        stop: one past the last input column fed (P + width).
        width: response columns computed (the rest of the R columns are padding for every row).
    """

    start: int
    stop: int
    width: int


def _window(batch: RolloutBatch) -> _Window:
    p, r = batch.prompt_len, batch.response_len
    used = batch.attention_mask.bool().any(dim=0)
    real_prompt = torch.nonzero(used[:p]).flatten()
    start = min(int(real_prompt[0]), p - 1) if real_prompt.numel() else p - 1
    real_resp = torch.nonzero(used[p:]).flatten()
    width = int(real_resp[-1]) + 1 if real_resp.numel() else 0
    width = min(max(width, 1), r)  # keep >= 1 column so every micro-batch has a graph
    return _Window(start=start, stop=p + width, width=width)


def _inputs(batch: RolloutBatch, w: _Window) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Model keyword inputs of the window and the kept (response-predicting) column indices."""
    cols = slice(w.start, w.stop)
    inputs = {
        "input_ids": batch.input_ids[:, cols],
        "attention_mask": batch.attention_mask[:, cols],
        "position_ids": batch.position_ids[:, cols],
    }
    first = batch.prompt_len - 1 - w.start
    keep = torch.arange(first, first + w.width, device=batch.input_ids.device)
    return inputs, keep


def _to_response(x: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
    """Right-pad ``(b, width)`` to ``(b, R)`` and zero where ``response_mask`` is 0."""
    extra = batch.response_len - x.shape[1]
    if extra > 0:
        x = torch.nn.functional.pad(x, (0, extra))
    return torch.where(batch.response_mask != 0, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _shared_prompt_logits(model: nn.Module, batch: RolloutBatch, w: _Window) -> torch.Tensor | None:
    """Response-predicting logits ``(b, width, V)`` with each distinct prompt run once.

    Returns None (use the plain forward) when no two rows share their prompt columns, or when
    activation checkpointing is on (it disables the KV cache in training).
    """
    if model.training and activation_checkpointing_on(model):
        return None
    p = batch.prompt_len
    cols = slice(w.start, p)
    ids, mask = batch.input_ids[:, cols], batch.attention_mask[:, cols]
    unique, inverse = torch.unique(torch.cat([ids, mask], dim=1), dim=0, return_inverse=True)
    if unique.shape[0] == ids.shape[0]:
        return None
    from transformers import DynamicCache

    width = p - w.start
    u_ids, u_mask = unique[:, :width], unique[:, width:]
    cache = DynamicCache()
    first = model(input_ids=u_ids, attention_mask=u_mask,
                  position_ids=(u_mask.cumsum(-1) - 1).clamp(min=0), **cache_kwargs(model, cache),
                  logits_to_keep=1).logits[:, -1:]  # (u, 1, V): response col 0
    if cache.get_seq_length() != width:
        # A cache the model did not fill (e.g. a wrong keyword) would score the responses
        # without their prompt, silently.
        raise RuntimeError(
            f"the shared-prompt KV cache holds {cache.get_seq_length()} columns after the "
            f"prompt forward; expected the prompt's {width}"
        )
    if w.width == 1:
        return first[inverse]
    cache.reorder_cache(inverse)  # one cache row per batch row (index_select: differentiable)
    resp = slice(p, p + w.width - 1)
    rest = model(input_ids=batch.input_ids[:, resp],
                 attention_mask=batch.attention_mask[:, w.start : p + w.width - 1],
                 position_ids=batch.position_ids[:, resp], **cache_kwargs(model, cache)).logits
    return torch.cat([first[inverse], rest], dim=1)


def policy_forward(
    model: nn.Module,
    batch: RolloutBatch,
    temperature: float = 1.0,
    *,
    entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token logprobs (and optionally entropy) of the responses of one micro-batch.

    Args:
        model: an HF causal LM (FSDP-sharded or plain) accepting ``logits_to_keep``.
        batch: the micro-batch.
        temperature: logprobs are of ``softmax(logits / temperature)`` (0 is treated as 1).
        entropy: also return the per-token entropy of that distribution.
        entropy_grad: keep the entropy in the autograd graph (for an entropy bonus); else it
            is computed from detached logits.

    Returns:
        ``(logprobs, entropy)``, each ``(b, R)`` float32 and 0 where ``response_mask`` is 0;
        ``entropy`` is None unless asked for. ``logprobs`` carries grad when grad is enabled.
    """
    if batch.response_len == 0:
        empty = batch.response_mask.new_zeros(batch.response_mask.shape)
        return empty, (empty.clone() if entropy else None)
    w = _window(batch)
    logits = _shared_prompt_logits(model, batch, w)
    if logits is None:
        inputs, keep = _inputs(batch, w)
        logits = model(**inputs, use_cache=False, logits_to_keep=keep).logits  # (b, width, V)
    labels = batch.responses[:, : w.width]
    logp = logprobs_from_logits(logits, labels, temperature)
    ent = None
    if entropy:
        if entropy_grad:
            ent = entropy_from_logits(logits, temperature)
        else:
            with torch.no_grad():
                ent = entropy_from_logits(logits.detach(), temperature)
        ent = _to_response(ent, batch)
    return _to_response(logp, batch), ent


def value_forward(model: nn.Module, batch: RolloutBatch) -> torch.Tensor:
    """Critic values of the responses of one micro-batch.

    The value of response token ``j`` is the critic's output at column ``P + j - 1`` (the
    state before the token is generated), as in verl.

    Args:
        model: a ``CriticModel`` (FSDP-sharded or plain).
        batch: the micro-batch.

    Returns:
        ``(b, R)`` float32, 0 where ``response_mask`` is 0; carries grad when grad is enabled.
    """
    if batch.response_len == 0:
        return batch.response_mask.new_zeros(batch.response_mask.shape)
    w = _window(batch)
    inputs, keep = _inputs(batch, w)
    return _to_response(model(**inputs, keep=keep), batch)


__all__ = ["micro_batches", "policy_forward", "value_forward"]
