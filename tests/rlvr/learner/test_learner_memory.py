"""Chunked vocabulary projection, token-budget micro-batches and sequence packing: same numbers."""

from __future__ import annotations

import pytest
import torch
from learner_helpers import make_batch, make_group_batch, max_rel_diff, params, with_advantages
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import AutoModelForCausalLM

from rlvr.learner import Actor, ActorConfig, OptimConfig
from rlvr.learner.batching import micro_batch_rows, row_cost_parts
from rlvr.learner.logprobs import packing_supported, policy_forward


@pytest.fixture(scope="module")
def plain_model(tiny_model_path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()


class _WidestVocabTensor(TorchDispatchMode):
    """Records the most elements of any new op output whose last dimension is the vocabulary."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab, self.most = vocab, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "is_view", False):  # e.g. the weight's transpose: no new memory
            return out
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == self.vocab:
                self.most = max(self.most, t.numel())
        return out


def full_logits_reference(model, batch, weights, temperature):
    """sum(w0 * logp + w1 * entropy) from the full (b, T, V) logits, plain autograd."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                   position_ids=batch.position_ids).logits.float() / temperature
    p = batch.prompt_len
    lsm = torch.log_softmax(logits[:, p - 1 : -1], dim=-1)
    logp = lsm.gather(-1, batch.responses.unsqueeze(-1)).squeeze(-1)
    ent = -(lsm.exp() * lsm).sum(-1)
    m = batch.response_mask
    return (weights[0] * logp * m).sum() + (weights[1] * ent * m).sum()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_projection_gives_the_full_logits_values_and_gradients(plain_model, temperature):
    batch = make_batch(5, seed=21)
    g = torch.Generator().manual_seed(1)
    weights = torch.randn((2,) + tuple(batch.response_mask.shape), generator=g)
    ps = list(plain_model.parameters())
    want = torch.autograd.grad(full_logits_reference(plain_model, batch, weights, temperature), ps)
    vocab = plain_model.config.vocab_size
    spy = _WidestVocabTensor(vocab)
    with spy:
        logp, ent = policy_forward(plain_model, batch, temperature, entropy=True,
                                   entropy_grad=True, chunk=3)
        total = (weights[0] * logp).sum() + (weights[1] * ent).sum()
        got = torch.autograd.grad(total, ps)
    assert spy.most == 3 * vocab  # never more than one chunk of logits, forward or backward
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    assert max(float(x.abs().max()) for x in want) > 1e-3


def test_token_budget_micro_batches_cover_every_row_within_the_budget():
    batch = make_batch(12, seed=22)
    prompt, resp = row_cost_parts(batch)
    for packed in (False, True):
        spans = micro_batch_rows(batch, max_rows=5, max_tokens=40, packed=packed)
        assert [i for sp in spans for i in sp] == list(range(12))
        for sp in spans:
            cost = (sum(prompt[i] + resp[i] for i in sp) if packed
                    else len(sp) * (max(prompt[i] for i in sp) + max(resp[i] for i in sp)))
            assert len(sp) <= 5 and (cost <= 40 or len(sp) == 1)
        forced = micro_batch_rows(batch, max_rows=5, max_tokens=40, packed=packed,
                                  count=len(spans) + 2)
        assert len(forced) == len(spans) + 2
        assert [i for sp in forced for i in sp] == list(range(12))
    assert len(micro_batch_rows(batch, 5, max_tokens=10**6)) == 3  # rows still cap it


def learner(path, dist_info, **kw):
    cfg = ActorConfig(optim=OptimConfig(lr=1.0, eps=1.0, grad_clip=0.0), entropy_coef=0.01,
                        **kw)
    return Actor.from_pretrained(path, cfg, dist_info)


def test_token_budget_and_packing_give_the_same_update(tiny_model_path, dist_info):
    batch = with_advantages(make_group_batch(groups=3, size=4, seed=23), seed=23)
    runs = {}
    for name, kw in {"rows": dict(micro_batch_size=64),
                     "budget": dict(micro_batch_size=64, max_tokens_per_micro_batch=40),
                     "packed": dict(micro_batch_size=64, max_tokens_per_micro_batch=40,
                                    sequence_packing=True)}.items():
        actor = learner(tiny_model_path, dist_info, **kw)
        if name == "packed":
            assert packing_supported(actor.module)
        start = params(actor.module)
        old = actor.compute_logprobs(batch)
        batch.set("old_logprobs", old + 0.2 * batch.response_mask)  # ratios != 1: clipping too
        metrics = actor.update(batch)
        n_micro = len(actor.micro_batches(batch))
        runs[name] = (old, metrics, {k: v - start[k] for k, v in params(actor.module).items()},
                      n_micro)
    base_old, base_m, base_d, base_n = runs["rows"]
    assert base_n == 1 and runs["budget"][3] > 1 and runs["packed"][3] > 1
    for name in ("budget", "packed"):
        old, m, d, _ = runs[name]
        torch.testing.assert_close(old, base_old, atol=2e-5, rtol=1e-5)
        for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/entropy", "actor/grad_norm"):
            assert m[key] == pytest.approx(base_m[key], rel=1e-4, abs=1e-6), (name, key)
        assert max_rel_diff(d, base_d) < 1e-3, name
