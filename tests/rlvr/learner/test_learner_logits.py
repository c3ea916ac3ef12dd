"""Chunked token logprobs and entropy from logits (``rlvr.learner.logits``)."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.errors import ConfigError, ShapeError
from rlvr.learner.logits import entropy_from_logits, logprobs_from_logits

T = torch.tensor
ATOL = 1e-5


def naive_logprobs(logits, labels, t):
    return (
        torch.log_softmax(logits.float() / t, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    )


def naive_entropy(logits, t):
    logp = torch.log_softmax(logits.float() / t, dim=-1)
    return -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_rows", [None, 3])
def test_logprobs_and_entropy_match_naive(temperature, dtype, chunk_rows):
    torch.manual_seed(0)
    logits = (torch.randn(2, 5, 37) * 4).to(dtype).requires_grad_()
    labels = torch.randint(0, 37, (2, 5))
    got = logprobs_from_logits(logits, labels, temperature, chunk_rows=chunk_rows)
    want = naive_logprobs(logits, labels, temperature)
    assert got.dtype == torch.float32 and got.shape == (2, 5)
    assert torch.allclose(got, want, atol=ATOL)
    ent = entropy_from_logits(logits, temperature, chunk_rows=chunk_rows)
    assert torch.allclose(ent, naive_entropy(logits, temperature), atol=1e-4)
    g1 = torch.autograd.grad((got * 0.3 + ent * 0.7).sum(), logits)[0]
    g2 = torch.autograd.grad((want * 0.3 + naive_entropy(logits, temperature) * 0.7).sum(), logits)[
        0
    ]
    assert torch.allclose(g1.float(), g2.float(), atol=1e-4)


def test_temperature_zero_is_one_and_negative_raises():
    logits = torch.randn(4, 9)
    labels = torch.randint(0, 9, (4,))
    assert torch.equal(
        logprobs_from_logits(logits, labels, 0.0), logprobs_from_logits(logits, labels, 1.0)
    )
    assert torch.equal(entropy_from_logits(logits, 0.0), entropy_from_logits(logits, 1.0))
    with pytest.raises(ConfigError, match="temperature must be >= 0; got -1.0"):
        logprobs_from_logits(logits, labels, -1.0)
    with pytest.raises(
        ShapeError, match=r"labels has shape \(3,\); expected logits.shape\[:-1\] = \(4,\)"
    ):
        logprobs_from_logits(logits, labels[:3])


def test_entropy_ignores_minus_inf_logits():
    logits = T([[0.0, 0.0, float("-inf")]])
    assert entropy_from_logits(logits).item() == pytest.approx(math.log(2.0))


def test_no_vocab_sized_float_copy_is_kept_for_backward():
    vocab = 512
    logits = torch.randn(32, vocab, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (32,))
    saved: list[torch.Tensor] = []

    def pack(t):
        saved.append(t)
        return t

    for fn in (
        lambda: logprobs_from_logits(logits, labels, 0.7, chunk_rows=8),
        lambda: entropy_from_logits(logits, 0.7, chunk_rows=8),
    ):
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn().sum().backward()
        big = [t for t in saved if t.numel() >= vocab]
        assert big, "expected the chunks of the input to be saved"
        for t in big:  # only views of the input logits, no float32/scaled copies
            assert t.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()
