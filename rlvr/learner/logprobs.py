"""Forward passes over the response span: token logprobs, entropy and values per micro-batch.

In a ``RolloutBatch`` the logits at column ``t`` predict the token at ``t + 1``, so the response
token ``responses[:, j]`` (column ``P + j``) is scored by the logits of column ``P + j - 1``.

The vocabulary projection is never held in full. ``policy_forward`` swaps the model's LM head
for one call (``_ScoringHead``): it receives the hidden states of the response-predicting
positions (the model is called with ``logits_to_keep`` = those positions) and turns them into
logprobs (and entropy) chunk by chunk of positions, saving no logits for the backward (which
recomputes each chunk's), so at most one ``(chunk, V)`` logits block exists at a time. At 152k
vocab, micro-batch 8 and 4k response tokens that is ~64 MiB instead of ~10 GB of logits plus as
much of their gradient. The logits are float32 (the head's weight is upcast once per call: at 7B,
2.2 GB in the forward, and with its float32 gradient accumulator 4.4 GB in the backward). The
head's weight is used inside the model's own forward, so FSDP gathers and reduces it as usual.

Before the forward, each micro-batch is cropped to the columns some row actually uses (the
common left padding of the prompts and the common right padding of the responses), which
changes nothing but the cost: padding is masked out of attention and position ids are explicit.

Shared prompts: GRPO-style batches hold each prompt ``group_size`` times. When rows of a
micro-batch share their (windowed) prompt, ``policy_forward`` runs each distinct prompt once
with a KV cache, checks that the cache holds exactly the prompt's columns, gathers the cache
rows back to one per row (a differentiable index, so gradients of every row reach the shared
prompt activations), and runs only the response columns on top.
The logprobs equal the row-by-row forward's (the same attention over the same keys); the
gradient is the same sum, accumulated in the shared activations. In training under activation
checkpointing (whose recomputation would append to the cache again) and for micro-batches
without repeated prompts the plain forward is used.

Sequence packing (``packed=True``): the rows' real tokens are concatenated into one row with
position ids restarting at 0 for each sequence and no attention mask; transformers (>= 4.56)
turns restarting position ids into a block-diagonal causal mask for sdpa/eager attention, and
flash-attention kernels take them natively. No padding is computed at all. Models whose
attention cannot (``packing_supported``) fall back to the dense forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rlvr.batch import RolloutBatch
from rlvr.hf_compat import activation_checkpointing_on, cache_kwargs
from rlvr.learner.logits import CHUNK_ELEMENTS, entropy_from_logits, logprobs_from_logits
from rlvr.trajectory import logprob_temperature


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


class _HeadScore(torch.autograd.Function):
    """logprob of ``labels`` (and entropy) under ``softmax((h W^T + b) / t)``, chunk by chunk.

    The logits are computed in float32 (``h``, ``W`` and ``b`` upcast, as sglang's
    ``--enable-fp32-lm-head`` does): bf16 logits of a ~20-magnitude vocabulary are rounded in
    steps of 0.125, which alone moves token logprobs by a few hundredths against the engine.
    ``W`` is upcast once per call, not per chunk.

    Forward: ``(n, 1|2)`` float32 (the values of ``rlvr.learner.logits.logprobs_from_logits`` and
    ``entropy_from_logits``). Only the inputs and the per-row logsumexp are saved: the backward
    recomputes each chunk's ``(chunk, V)`` logits, so no logits outlive their chunk. With
    ``z = logits / t``, ``p = softmax(z)``: ``d logp / dz = onehot(label) - p`` and
    ``d H / dz = -p (z - sum(p z))``; both are divided by ``t`` for the logits. The head's
    weight (and bias) gradient is accumulated over the chunks in float32 and cast to the
    weight's dtype once, not summed chunk by chunk in bf16.
    """

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                labels: torch.Tensor, t: float, want_entropy: bool, step: int) -> torch.Tensor:
        w32 = weight.float()
        b32 = bias.float() if bias is not None else None
        outs, lses = [], []
        for s in range(0, hidden.shape[0], step):
            logits = nn.functional.linear(hidden[s : s + step].float(), w32, b32)  # (n, V) fp32
            rows = max(1, logits.shape[0])
            out = [logprobs_from_logits(logits, labels[s : s + step], t, chunk_rows=rows)]
            if want_entropy:
                out.append(entropy_from_logits(logits, t, chunk_rows=rows))
            outs.append(torch.stack(out, dim=-1))
            lses.append(torch.logsumexp(logits / t, dim=-1))
        del w32
        lse = torch.cat(lses) if lses else hidden.new_zeros(0, dtype=torch.float32)
        ctx.save_for_backward(hidden, weight, bias, labels, lse)
        ctx.t, ctx.want_entropy, ctx.step = t, want_entropy, step
        width = 2 if want_entropy else 1
        return torch.cat(outs) if outs else hidden.new_zeros(0, width, dtype=torch.float32)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, bias, labels, lse = ctx.saved_tensors
        t, step = ctx.t, ctx.step
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        w32 = weight.float()
        b32 = bias.float() if bias is not None else None
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(w32) if need_w else None
        grad_b = torch.zeros_like(b32) if (need_b and b32 is not None) else None
        for s in range(0, hidden.shape[0], step):
            h = hidden[s : s + step].float()
            z = nn.functional.linear(h, w32, b32) / t
            p = torch.exp(z - lse[s : s + step].unsqueeze(-1))
            g = grad[s : s + step].float()
            gz = -p * g[:, :1]
            gz.scatter_add_(-1, labels[s : s + step].unsqueeze(-1), g[:, :1])
            if ctx.want_entropy:
                zero = torch.zeros((), device=z.device)
                pz = torch.where(p > 0, p * z, zero)
                centred = torch.where(p > 0, z - pz.sum(dim=-1, keepdim=True), zero)
                gz -= g[:, 1:2] * p * centred
            gz /= t
            if grad_h is not None:
                grad_h[s : s + step] = (gz @ w32).to(hidden.dtype)
            if grad_w is not None:
                grad_w.addmm_(gz.t(), h)
            if grad_b is not None:
                grad_b += gz.sum(dim=0)
        return (grad_h,
                grad_w.to(weight.dtype) if grad_w is not None else None,
                grad_b.to(bias.dtype) if grad_b is not None else None,
                None, None, None, None)


class _ScoringHead:
    """For one model call, the LM head returns ``(b, k, 1|2)`` [logprob, entropy], not logits.

    ``labels`` ``(b, k)`` are the tokens scored at the ``k`` kept positions, ``chunk`` positions
    at a time in float32 (``_HeadScore``: each chunk's logits are recomputed in the backward).
    """

    def __init__(self, model: nn.Module, labels: torch.Tensor, temperature: float, *,
                 entropy: bool, chunk: int | None = None, rows: torch.Tensor | None = None
                 ) -> None:
        getter: Any = getattr(model, "get_output_embeddings", None)
        head = getter() if callable(getter) else None
        if not isinstance(head, nn.Linear):
            raise TypeError(f"{type(model).__name__} has no nn.Linear output embedding (LM head)")
        self.head = head
        self.labels = labels
        self.t = logprob_temperature(temperature)
        self.entropy = entropy
        self.chunk = chunk
        self.rows = rows  # gather these rows of the hidden states first (one per scored row)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.rows is not None:
            hidden = hidden[self.rows]
        b, k, h = hidden.shape
        flat, labels = hidden.reshape(b * k, h), self.labels.reshape(b * k)
        vocab = self.head.weight.shape[0]
        step = self.chunk or max(1, CHUNK_ELEMENTS // max(vocab, 1))
        out = _HeadScore.apply(flat, self.head.weight, self.head.bias, labels, self.t,
                               self.entropy, step)
        width = 2 if self.entropy else 1
        return out.reshape(b, k, width).clone()  # not a view: FSDP hooks the model's output

    def __enter__(self) -> _ScoringHead:
        self.head.forward = self  # type: ignore[method-assign,assignment]  # one call
        return self

    def __exit__(self, *exc: object) -> None:
        del self.head.forward


def _shared_prompt_forward(model: nn.Module, batch: RolloutBatch, w: _Window, labels: torch.Tensor,
                           temperature: float, entropy: bool, chunk: int | None
                           ) -> torch.Tensor | None:
    """``(b, width, 1|2)`` scores with each distinct prompt run once, or None (no sharing).

    Both model calls return scores that reach the loss (FSDP registers its pre-backward hooks
    on a forward's outputs; a forward reaching the loss only through the KV cache would find its
    layers' weights resharded in the backward).

    Returns None (use the plain forward) when no two rows share their prompt columns, or in
    training under activation checkpointing.
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
    # Response column 0 is scored from each prompt's last position, gathered to one per row.
    with _ScoringHead(model, labels[:, :1], temperature, entropy=entropy, chunk=chunk,
                      rows=inverse):
        first = model(input_ids=u_ids, attention_mask=u_mask,
                      position_ids=(u_mask.cumsum(-1) - 1).clamp(min=0),
                      **cache_kwargs(model, cache), logits_to_keep=1).logits  # (b, 1, 1|2)
    if cache.get_seq_length() != width:
        # A cache the model did not fill (e.g. a wrong keyword) would score the responses
        # without their prompt, silently.
        raise RuntimeError(
            f"the shared-prompt KV cache holds {cache.get_seq_length()} columns after the "
            f"prompt forward; expected the prompt's {width}"
        )
    if w.width == 1:
        return first
    cache.reorder_cache(inverse)  # one cache row per batch row (index_select: differentiable)
    resp = slice(p, p + w.width - 1)
    with _ScoringHead(model, labels[:, 1:], temperature, entropy=entropy, chunk=chunk):
        rest = model(input_ids=batch.input_ids[:, resp],
                     attention_mask=batch.attention_mask[:, w.start : p + w.width - 1],
                     position_ids=batch.position_ids[:, resp], **cache_kwargs(model, cache)).logits
    return torch.cat([first, rest], dim=1)


def packing_supported(model: nn.Module) -> bool:
    """Whether ``model`` attends within packed sequences given restarting position ids.

    flash-attention implementations take them natively; sdpa/eager need transformers'
    packed-sequence mask (``masking_utils.find_packed_sequence_indices``, 4.56+).
    """
    config: Any = getattr(model, "config", None)
    impl = str(getattr(config, "_attn_implementation", "") or "")
    if "flash" in impl:
        return True
    try:
        from transformers import masking_utils
    except ImportError:
        return False
    return impl in ("sdpa", "eager") and hasattr(masking_utils, "find_packed_sequence_indices")


def _packed_forward(model: nn.Module, batch: RolloutBatch, temperature: float, entropy: bool,
                    chunk: int | None) -> torch.Tensor:
    """``(b, R, 1|2)`` scores from one packed row of all the real tokens (0 on padding)."""
    real = batch.attention_mask.bool()
    p = batch.prompt_len
    n_prompt = real[:, :p].sum(dim=1)
    n_resp = real[:, p:].sum(dim=1)
    lengths = n_prompt + n_resp
    offsets = torch.cumsum(lengths, 0) - lengths
    ids = batch.input_ids[real].unsqueeze(0)  # row-major: each row's tokens in order
    positions = batch.position_ids[real].unsqueeze(0)
    r = batch.response_len
    j = torch.arange(r, device=ids.device)
    valid = j.unsqueeze(0) < n_resp.unsqueeze(1)  # (b, R): real response columns
    # Response token j of row i sits at offsets[i] + n_prompt[i] + j; its logits one before.
    where = (offsets + n_prompt - 1).unsqueeze(1) + j.unsqueeze(0)
    keep = where[valid]
    labels = batch.responses[valid].unsqueeze(0)
    with _ScoringHead(model, labels, temperature, entropy=entropy, chunk=chunk):
        scored = model(input_ids=ids, position_ids=positions, use_cache=False,
                       logits_to_keep=keep).logits[0]  # (K, 1|2)
    out = scored.new_zeros(batch.response_mask.shape + (scored.shape[-1],))
    out[valid] = scored
    return out


def policy_forward(
    model: nn.Module,
    batch: RolloutBatch,
    temperature: float = 1.0,
    *,
    entropy: bool = False,
    entropy_grad: bool = False,
    packed: bool = False,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token logprobs (and optionally entropy) of the responses of one micro-batch.

    Args:
        model: an HF causal LM (FSDP-sharded or plain) accepting ``logits_to_keep``, with an
            ``nn.Linear`` LM head.
        batch: the micro-batch.
        temperature: logprobs are of ``softmax(logits / temperature)`` (0 is treated as 1).
        entropy: also return the per-token entropy of that distribution (computed in the
            same chunked pass; skipped when False).
        entropy_grad: keep the entropy in the autograd graph (for an entropy bonus); else it
            is detached.
        packed: concatenate the rows' real tokens into one sequence (no padding computed)
            when ``packing_supported(model)``; else the dense forward.
        chunk: positions per projection chunk (default: ``CHUNK_ELEMENTS // V``).

    Returns:
        ``(logprobs, entropy)``, each ``(b, R)`` float32 and 0 where ``response_mask`` is 0;
        ``entropy`` is None unless asked for. ``logprobs`` carries grad when grad is enabled.
    """
    if batch.response_len == 0:
        empty = batch.response_mask.new_zeros(batch.response_mask.shape)
        return empty, (empty.clone() if entropy else None)
    if packed and packing_supported(model):
        scores = _packed_forward(model, batch, temperature, entropy, chunk)
    else:
        w = _window(batch)
        labels = batch.responses[:, : w.width]
        shared = _shared_prompt_forward(model, batch, w, labels, temperature, entropy, chunk)
        if shared is None:
            inputs, keep = _inputs(batch, w)
            with _ScoringHead(model, labels, temperature, entropy=entropy, chunk=chunk):
                shared = model(**inputs, use_cache=False, logits_to_keep=keep).logits
        scores = shared
    logp = _to_response(scores[..., 0], batch)
    ent = None
    if entropy:
        ent = scores[..., 1] if entropy_grad else scores[..., 1].detach()
        ent = _to_response(ent, batch)
    return logp, ent


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


__all__ = ["packing_supported", "policy_forward", "value_forward"]
