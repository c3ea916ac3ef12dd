"""The LM head in bf16 compute: float32 logits and a float32-accumulated weight gradient."""

from __future__ import annotations

import torch
from torch import nn

from rlvr.learner.logprobs import _ScoringHead

N, H, V = 96, 64, 4096


class _Head(nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.lm_head = nn.Linear(H, V, bias=False, dtype=weight.dtype)
        self.lm_head.weight.data.copy_(weight)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head


def _case():
    g = torch.Generator().manual_seed(0)
    # Logits of a realistic scale (std ~8, tails near 30), as a trained LM head gives.
    hidden = (torch.randn(N, H, generator=g) * 2).to(torch.bfloat16)
    weight = (torch.randn(V, H, generator=g) * 0.5).to(torch.bfloat16)
    labels = torch.randint(0, V, (N,), generator=g)
    return hidden, weight, labels


def _reference(hidden, weight, labels):
    """float64 logprobs and weight gradient of sum(logprobs) from the same bf16 inputs."""
    w = weight.double().requires_grad_(True)
    logp = torch.log_softmax(hidden.double() @ w.t(), dim=-1).gather(-1, labels[:, None])[:, 0]
    logp.sum().backward()
    return logp.detach(), w.grad


def _score(hidden, weight, labels, chunk):
    model = _Head(weight)
    with _ScoringHead(model, labels[None], 1.0, entropy=False, chunk=chunk) as head:
        out = head(hidden[None])[0, :, 0]
    out.sum().backward()
    return out.detach(), model.lm_head.weight.grad


def test_bf16_head_logprobs_are_computed_from_float32_logits():
    hidden, weight, labels = _case()
    ref, _ = _reference(hidden, weight, labels)
    logp, _ = _score(hidden, weight, labels, chunk=16)
    # bf16 logits would be off by ~3e-2 on average here; float32 ones by ~1e-6.
    assert float((logp.double() - ref).abs().mean()) < 1e-4


def test_chunked_head_gradient_is_accumulated_in_float32():
    hidden, weight, labels = _case()
    _, ref = _reference(hidden, weight, labels)
    _, grad = _score(hidden, weight, labels, chunk=1)  # 96 chunks summed
    assert grad.dtype == torch.bfloat16
    # Accumulated in float32 and rounded once: within one bf16 rounding of the exact sum
    # (summed in bf16 chunk by chunk, the error is several roundings).
    err = (grad.double() - ref).abs()
    assert bool((err <= ref.abs() * 2**-8 + 1e-6).all()), float((err / ref.abs()).max())
