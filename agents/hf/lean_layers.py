# ruff: noqa: UP006, UP035, UP045  (TorchScript reads typing.List/Optional annotations)
"""The decoder layers of ``rlvr.agents.hf.lean_decoder``, TorchScript-compiled, GIL-free.

``run_layers`` is the arithmetic of a Llama-family forward from the embeddings to the last
position's logits: every layer's RMSNorm, projections, rotary embedding, KV-buffer write,
attention and SiLU MLP, then the final norm and the LM head. Compiled (``compiled_layers``), its
~45 ops per layer run in TorchScript's interpreter: no Python dispatch per op (a quickstart
decode step of 128 rows: 4.0 ms against 4.65 ms in Python) and one release of the GIL for the
whole call instead of one per op. A Python forward on the engine's worker thread waits for the
GIL after every op whenever the runner's Python (decoding, env steps, trajectories) runs on the
caller's thread, up to Python's switch interval (5 ms) each time, which is why the engine holds
finished completions until its batch drains (``rlvr.agents.hf.scheduler.HOLD_STEPS``). The
forward no longer needs that; the sampling and bookkeeping around it still take the GIL per op.

``torch.jit.script`` is deprecated in torch 2.13 but works on every torch this project admits;
where it fails (a torch without TorchScript), ``compiled_layers`` hands back the plain Python
function: the same numbers, with the GIL taken per op.

This file has no ``from __future__ import annotations``: TorchScript reads the annotations.
"""

import functools
import logging
import warnings
from typing import Callable, List, Optional

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

Weights = List[List[Optional[torch.Tensor]]]
"""Per layer: input norm, q, q bias, k, k bias, v, v bias, o, o bias, post-attention norm, gate,
gate bias, up, up bias, down, down bias (biases None when absent)."""


def _rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    """RMSNorm as transformers computes it: normalise in float32, scale in the input dtype."""
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    out = xf.to(x.dtype)
    return out if weight is None else weight * out


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x`` ``(B, heads, T, D)`` (transformers' ``rotate_half``)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def small_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    bias: torch.Tensor, scale: float) -> torch.Tensor:
    """Grouped-query attention as two matmuls and a softmax written out (CPU, small shapes).

    ``q`` ``(B, heads, T, D)``; ``keys``/``values`` ``(B, kv_heads, W, D)``; ``bias``
    ``(B, 1, T, W)``, 0 where attended and ``-inf`` elsewhere (every query attends to at least
    itself). Returns ``(B, heads, T, D)``. A group's query heads are stacked as rows of one
    matmul against their shared key/value head, so keys are never repeated.
    """
    rows, heads, steps, dim = q.shape[0], q.shape[1], q.shape[2], q.shape[3]
    kv_heads, width = keys.shape[1], keys.shape[2]
    group = heads // kv_heads
    scores = torch.matmul(q.reshape(rows, kv_heads, group * steps, dim), keys.transpose(2, 3))
    scores = scores.view(rows, kv_heads, group, steps, width).mul_(scale)
    scores = scores.add_(bias.unsqueeze(2))
    scores = scores.sub_(scores.amax(-1, keepdim=True)).exp_()
    scores = scores.div_(scores.sum(-1, keepdim=True))
    out = torch.matmul(scores.view(rows, kv_heads, group * steps, width), values)
    return out.view(rows, heads, steps, dim)


def run_layers(hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               keys: List[torch.Tensor], values: List[torch.Tensor],
               weights: Weights, eps: List[float], write: int, col: int,
               bias: Optional[torch.Tensor], mask: torch.Tensor, heads: int,
               kv_heads: int, scale: float, final_norm: Optional[torch.Tensor],
               final_eps: float, lm_head: torch.Tensor,
               lm_bias: Optional[torch.Tensor]) -> torch.Tensor:
    """The layers, final norm and LM head of one forward; returns the last position's logits.

    Args:
        hidden: ``(B, T, hidden)`` the token embeddings.
        cos: ``(B, 1, T, D)`` the rotary embedding's cosines at the positions.
        sin: ``(B, 1, T, D)`` its sines.
        keys: per layer ``(B, kv_heads, capacity, D)``; columns ``[write, write + T)`` are
            written, ``[col, write + T)`` attended.
        values: per layer, like ``keys``.
        weights: per layer, as ``Weights``.
        eps: per layer, the input and post-attention norms' epsilons (``2 * layers`` values).
        write: the first column written.
        col: the first column attended.
        bias: ``(B, 1, T, W)`` additive mask for ``small_attention``, or None to run SDPA.
        mask: ``(B, 1, T, W)`` bool, True where attended (SDPA's mask).
        heads: query heads.
        kv_heads: key/value heads (grouped-query attention when fewer than ``heads``).
        scale: the attention's score scale.
        final_norm: the final norm's weight.
        final_eps: its epsilon.
        lm_head: the LM head's weight ``(V, hidden)``.
        lm_bias: its bias, or None.
    """
    rows, steps = hidden.shape[0], hidden.shape[1]
    dim = keys[0].shape[3]
    end = write + steps
    for i, w in enumerate(weights):
        weight_q = w[1]
        weight_k = w[3]
        weight_v = w[5]
        weight_o = w[7]
        weight_gate = w[10]
        weight_up = w[12]
        weight_down = w[14]
        assert weight_q is not None and weight_k is not None and weight_v is not None
        assert weight_o is not None and weight_gate is not None and weight_up is not None
        assert weight_down is not None
        x = _rms_norm(hidden, w[0], eps[2 * i])
        q = F.linear(x, weight_q, w[2]).view(rows, steps, heads, dim).transpose(1, 2)
        k = F.linear(x, weight_k, w[4]).view(rows, steps, kv_heads, dim).transpose(1, 2)
        v = F.linear(x, weight_v, w[6]).view(rows, steps, kv_heads, dim).transpose(1, 2)
        q = _rotate(q, cos, sin)
        keys[i][:, :, write:end] = _rotate(k, cos, sin)
        values[i][:, :, write:end] = v
        k_all, v_all = keys[i][:, :, col:end], values[i][:, :, col:end]
        if bias is not None:
            out = small_attention(q, k_all, v_all, bias, scale)
        elif steps == 1 and heads != kv_heads:  # the query heads of a group as its rows
            out = F.scaled_dot_product_attention(
                q.reshape(rows, kv_heads, heads // kv_heads, dim), k_all, v_all,
                attn_mask=mask, scale=scale,
            ).reshape(rows, heads, 1, dim)
        else:
            out = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, scale=scale,
                                                 enable_gqa=heads != kv_heads)
        out = out.transpose(1, 2).reshape(rows, steps, heads * dim)
        hidden = hidden + F.linear(out, weight_o, w[8])
        x = _rms_norm(hidden, w[9], eps[2 * i + 1])
        gate = F.silu(F.linear(x, weight_gate, w[11]))
        hidden = hidden + F.linear(gate * F.linear(x, weight_up, w[13]), weight_down, w[15])
    last = _rms_norm(hidden[:, -1], final_norm, final_eps)
    return F.linear(last, lm_head, lm_bias)


@functools.cache
def compiled_layers() -> tuple[Callable[..., torch.Tensor], bool]:
    """``(run_layers compiled with TorchScript, True)``, else ``(run_layers, False)``.

    Compiled once per process, on first use (~0.5 s).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.script(run_layers), True
    except Exception as exc:  # a torch without TorchScript: the same function, in Python
        logger.info("lean decoder: TorchScript unavailable (%r); layers run in Python", exc)
        return run_layers, False
