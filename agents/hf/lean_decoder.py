"""A hand-written forward of Llama-family decoders over a HF module's own weights, for decoding.

``TransformersEngine`` runs every forward through this when the model allows it
(``lean_unsupported(model)`` is None): Qwen2, Llama and Mistral ``*ForCausalLM`` modules with a
SiLU MLP, full (not sliding-window) attention and plain (not sharded) parameters. Otherwise it
runs the module's own forward with a ``DynamicCache``.

What it saves against the module's forward, per decode step: transformers' Python around the
arithmetic (mask building, cache classes, output dataclasses, hooks) and the KV cache's
``torch.cat`` of every layer's whole history (keys and values live in preallocated buffers; a
step writes one column). The layers run compiled by TorchScript (``rlvr.agents.hf.lean_layers``): no
Python dispatch per op, and the GIL released for the whole forward. The arithmetic is the same
ops in the same order as transformers' modules (RMSNorm in float32, rotary embeddings from the
module's own ``rotary_emb``, grouped-query attention on the key/value heads) except attention
itself, which on CPU for small shapes is two matmuls and a softmax written out
(``SMALL_ATTENTION``) rather than SDPA: 3-4x faster there. Logits agree with the module's
forward to float rounding (tests/agents/test_lean_decoder.py, run on every transformers CI
tests, asserts 1e-5): on the quickstart's model, a prefill and four decode steps of 128 rows
differ by at most 4e-6 (transformers 5.24).

It reads the weights from the module at every call (no copies), so a shared actor's optimizer
steps and ``update_weights`` are seen at once. No dropout: it is for inference only.

Left padding: a padded prompt position attends to itself only (its keys are masked out for every
real position), so no attention row is empty and no NaN reaches the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rlvr.agents.hf.lean_layers import compiled_layers

SMALL_ATTENTION = 1 << 21
"""On CPU in float32, attention whose score tensor has at most this many elements (8 MiB) runs as
matmuls and an explicit softmax (``rlvr.agents.hf.lean_layers.small_attention``); larger, in other
dtypes
(SDPA accumulates them in float32) and on any accelerator, it runs SDPA. For a decode step or a
short prompt's prefill the explicit form is 3-4x faster on CPU: torch's softmax and flash
kernels pay per row of a short key axis."""

LEAN_ARCHITECTURES = ("Qwen2ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM")
"""The HF classes whose forward ``LeanDecoder`` reproduces."""


def lean_unsupported(model: nn.Module) -> str | None:
    """Why ``LeanDecoder`` cannot run ``model`` (None: it can).

    Args:
        model: a causal LM module.

    Returns:
        None when the lean forward reproduces the module's; otherwise a short reason for logs.
    """
    name = type(model).__name__
    if name not in LEAN_ARCHITECTURES:
        return f"{name} is not one of {LEAN_ARCHITECTURES}"
    config: Any = model.config
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act {config.hidden_act!r} is not 'silu'"
    if int(getattr(config, "pretraining_tp", 1) or 1) != 1:
        return "pretraining_tp > 1"
    if getattr(config, "use_sliding_window", False) or (
        name == "MistralForCausalLM" and getattr(config, "sliding_window", None) is not None
    ):
        return "sliding-window attention"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return "a layer without full attention"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "rotary_emb") or not hasattr(model, "lm_head"):
        return "no .model.rotary_emb / .lm_head"
    if any(hasattr(sub, "lora_A") for sub in model.modules()):
        return "LoRA adapter layers (the lean forward reads the base weights only)"
    params = list(model.parameters())
    if any(type(p.data) is not torch.Tensor for p in params):
        return "sharded (DTensor) parameters"
    if len({p.device for p in params}) != 1:
        return "parameters on several devices"
    return None


@dataclass
class KVBuffer:
    """Every layer's keys and values in preallocated buffers; columns ``[start, end)`` are used.

    Attributes:
        keys: per layer ``(B, kv_heads, capacity, head_dim)``.
        values: per layer, like ``keys``.
        start: the first used column (columns before it were trimmed as padding of every row).
        end: one past the last written column; a decode step writes column ``end``.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    start: int
    end: int

    @classmethod
    def empty(cls, layers: int, rows: int, kv_heads: int, capacity: int, head_dim: int,
              like: torch.Tensor) -> KVBuffer:
        """Unwritten buffers of ``capacity`` columns, dtype and device of ``like``."""
        shape = (rows, kv_heads, capacity, head_dim)
        return cls([like.new_empty(shape) for _ in range(layers)],
                   [like.new_empty(shape) for _ in range(layers)], 0, 0)

    @property
    def width(self) -> int:
        """Used columns (``end - start``)."""
        return self.end - self.start

    @property
    def capacity(self) -> int:
        """Columns allocated."""
        return self.keys[0].shape[2]

    def select(self, rows: torch.Tensor | None, start: int) -> None:
        """Keep batch ``rows`` (None: all) and used columns from ``start`` on (relative).

        Without ``rows`` nothing is copied; with them, each buffer is gathered once (keeping its
        unused columns as room) by ``index_select``, 3-6x faster on CPU than advanced indexing.
        """
        self.start += start
        if rows is None:
            return
        self.keys = [k.index_select(0, rows)[:, :, self.start:] for k in self.keys]
        self.values = [v.index_select(0, rows)[:, :, self.start:] for v in self.values]
        self.end -= self.start
        self.start = 0

    def reserve(self, columns: int) -> None:
        """Make room for ``columns`` more columns after ``end`` (reallocates when short)."""
        if self.end + columns <= self.capacity:
            return
        capacity = self.width + max(columns, self.width, 16)
        self.keys = [_regrow(k, self.start, self.end, capacity) for k in self.keys]
        self.values = [_regrow(v, self.start, self.end, capacity) for v in self.values]
        self.end -= self.start
        self.start = 0

    @staticmethod
    def merged(a: KVBuffer, b: KVBuffer, room: int) -> KVBuffer:
        """The rows of ``a`` then ``b``, right-aligned (the shorter left-padded with zeros).

        Returns a buffer of width ``max(a.width, b.width)`` with ``room`` free columns after it.
        """
        width = max(a.width, b.width)
        rows_a, rows_b = a.keys[0].shape[0], b.keys[0].shape[0]
        out = KVBuffer.empty(len(a.keys), rows_a + rows_b, a.keys[0].shape[1], width + room,
                             a.keys[0].shape[3], a.keys[0])
        for dst_list, src_a, src_b in ((out.keys, a.keys, b.keys), (out.values, a.values,
                                                                     b.values)):
            for dst, xa, xb in zip(dst_list, src_a, src_b):
                dst[:rows_a, :, : width - a.width].zero_()
                dst[rows_a:, :, : width - b.width].zero_()
                dst[:rows_a, :, width - a.width:width] = xa[:, :, a.start:a.end]
                dst[rows_a:, :, width - b.width:width] = xb[:, :, b.start:b.end]
        out.end = width
        return out


def _regrow(x: torch.Tensor, start: int, end: int, capacity: int) -> torch.Tensor:
    """A new ``capacity``-column buffer holding columns ``[start, end)`` of ``x`` first."""
    out = x.new_empty((x.shape[0], x.shape[1], capacity, x.shape[3]))
    out[:, :, : end - start] = x[:, :, start:end]
    return out


class LeanDecoder:
    """The forward pass of a Llama-family causal LM, writing keys/values into a ``KVBuffer``.

    Args:
        model: a module for which ``lean_unsupported`` is None.
    """

    def __init__(self, model: nn.Module) -> None:
        module: Any = model
        self.model = module
        inner = module.model
        attn = inner.layers[0].self_attn
        config = module.config
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(attn, "head_dim", config.hidden_size // self.heads))
        self.scaling = float(getattr(attn, "scaling", self.head_dim**-0.5))
        self.layers = len(inner.layers)
        self.eps = [float(norm.variance_epsilon) for layer in inner.layers
                    for norm in (layer.input_layernorm, layer.post_attention_layernorm)]
        """Each layer's input and post-attention norm epsilons (config, fixed)."""
        self.final_eps = float(inner.norm.variance_epsilon)
        self._parts = [
            (layer.input_layernorm, layer.self_attn.q_proj, layer.self_attn.k_proj,
             layer.self_attn.v_proj, layer.self_attn.o_proj, layer.post_attention_layernorm,
             layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)
            for layer in inner.layers]
        """Each layer's norms and projections (``_weights`` reads their tensors at every call)."""
        self._layers, self.compiled = compiled_layers()
        """The layers' forward (``rlvr.agents.hf.lean_layers``); ``compiled``: by TorchScript."""

    def new_buffer(self, rows: int, capacity: int) -> KVBuffer:
        """An empty ``KVBuffer`` for ``rows`` rows of ``capacity`` columns."""
        like = self.model.model.embed_tokens.weight
        return KVBuffer.empty(self.layers, rows, self.kv_heads, capacity, self.head_dim, like)

    def prefill(self, input_ids: torch.Tensor, real: torch.Tensor, positions: torch.Tensor,
                kv: KVBuffer) -> torch.Tensor:
        """Run left-padded prompts into an empty ``kv``; return their last logits ``(B, V)``.

        Args:
            input_ids: ``(B, T)``, left-padded.
            real: ``(B, T)`` bool, False on left padding.
            positions: ``(B, T)`` position ids (0 at each row's first real token).
            kv: a buffer with ``end == start`` and at least ``T`` free columns.
        """
        width = input_ids.shape[1]
        causal = torch.ones(width, width, dtype=torch.bool, device=input_ids.device).tril()
        self_only = torch.eye(width, dtype=torch.bool, device=input_ids.device)
        mask = (causal[None] & real[:, None, :]) | self_only[None]
        return self._forward(input_ids, positions, kv, mask[:, None])

    def decode(self, last_ids: torch.Tensor, positions: torch.Tensor, kv: KVBuffer,
               real: torch.Tensor) -> torch.Tensor:
        """Feed one token per row; return the next-token logits ``(B, V)``.

        Args:
            last_ids: ``(B, 1)`` the tokens to feed.
            positions: ``(B, 1)`` their position ids.
            kv: the rows' buffer; column ``kv.end`` is written.
            real: ``(B, kv.width + 1)`` bool, True on the columns each row attends to (its real
                cached tokens and the new one).
        """
        return self._forward(last_ids, positions, kv, real[:, None, None, :])

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, kv: KVBuffer,
                 mask: torch.Tensor) -> torch.Tensor:
        inner = self.model.model
        rows, steps = ids.shape
        kv.reserve(steps)
        col, end = kv.start, kv.end + steps
        bias = None  # small attention on CPU: two matmuls and a softmax (small_attention)
        if ids.device.type == "cpu" and kv.keys[0].dtype == torch.float32 \
                and rows * self.heads * steps * (end - col) <= SMALL_ATTENTION:
            bias = torch.zeros(mask.shape, dtype=kv.keys[0].dtype).masked_fill_(~mask,
                                                                                float("-inf"))
        hidden = inner.embed_tokens(ids)
        cos, sin = inner.rotary_emb(hidden, positions)
        weights = self._weights()
        head = self.model.lm_head
        logits = self._layers(
            hidden, cos[:, None], sin[:, None], kv.keys, kv.values, weights, self.eps, kv.end,
            col, bias, mask, self.heads, self.kv_heads, self.scaling, inner.norm.weight,
            self.final_eps, head.weight, getattr(head, "bias", None))
        kv.end = end
        return logits

    def _weights(self) -> list[list[torch.Tensor | None]]:
        """Every layer's tensors in ``rlvr.agents.hf.lean_layers.Weights`` order.

        Read afresh at every call from the modules found at construction: a shared actor's
        parameters may have been replaced. (Walking ``model.model.layers[i].self_attn...`` for
        them every call cost ~60 us of attribute lookups per forward.)
        """
        return [[norm.weight, q.weight, q.bias, k.weight, k.bias, v.weight, v.bias, o.weight,
                 o.bias, post.weight, gate.weight, gate.bias, up.weight, up.bias, down.weight,
                 down.bias]
                for norm, q, k, v, o, post, gate, up, down in self._parts]
