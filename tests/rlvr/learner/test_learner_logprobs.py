from __future__ import annotations

import pytest
import torch
from learner_helpers import make_batch, make_group_batch
from transformers import AutoModelForCausalLM

from rlvr.learner import Actor, ActorConfig
from rlvr.learner.logprobs import policy_forward


@pytest.fixture(scope="module")
def plain_model(tiny_model_path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def actor(tiny_model_path, dist_info):
    return Actor.from_pretrained(tiny_model_path, ActorConfig(micro_batch_size=3), dist_info)


def naive(model, batch, temperature):
    """Per row, unpadded, full logits over the whole sequence, log_softmax: the textbook way."""
    b, r = batch.response_mask.shape
    p = batch.prompt_len
    logp = torch.zeros(b, r)
    ent = torch.zeros(b, r)
    with torch.no_grad():
        for i in range(b):
            keep = batch.attention_mask[i].bool()
            ids = batch.input_ids[i][keep][None]
            n_prompt = int(batch.attention_mask[i, :p].sum())
            n_resp = int(batch.attention_mask[i, p:].sum())
            logits = model(ids).logits[0].float() / temperature
            lsm = torch.log_softmax(logits, dim=-1)
            for j in range(n_resp):
                pos = n_prompt + j - 1  # logits at t predict token t + 1
                logp[i, j] = lsm[pos, batch.responses[i, j]]
                ent[i, j] = -(lsm[pos].exp() * lsm[pos]).sum()
    mask = batch.response_mask
    return logp * mask, ent * mask


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_and_entropy_equal_full_logits_reference(actor, plain_model, temperature):
    batch = make_batch(7, seed=1)
    assert batch.attention_mask[:, 0].min() == 0  # some prompts are left-padded
    logp, ent = actor.compute_logprobs_and_entropy(batch, temperature)
    ref_logp, ref_ent = naive(plain_model, batch, temperature)
    assert logp.shape == ent.shape == batch.response_mask.shape
    torch.testing.assert_close(logp, ref_logp, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=2e-5, rtol=1e-5)
    masked = logp[batch.response_mask == 0]
    assert masked.numel() > 0 and torch.equal(masked, torch.zeros_like(masked))
    assert torch.equal(actor.compute_logprobs(batch, temperature), logp)


def test_only_the_response_span_is_projected_to_the_vocabulary(actor):
    batch = make_batch(6, seed=2)
    seen = []
    lm_head = actor.module.lm_head
    handle = lm_head.register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape)))
    try:
        actor.compute_logprobs(batch)
    finally:
        handle.remove()
    assert len(seen) == 2  # micro_batch_size 3 -> two micro-batches
    widest_response = int(batch.attention_mask[:, batch.prompt_len:].sum(dim=-1).max())
    assert all(rows <= 3 and cols <= batch.response_len for rows, cols, _ in seen)
    assert max(cols for _, cols, _ in seen) == widest_response


def test_micro_batch_size_does_not_change_logprobs(tiny_model_path, dist_info, actor):
    batch = make_batch(6, seed=3)
    one = Actor.from_pretrained(tiny_model_path, ActorConfig(micro_batch_size=1), dist_info)
    torch.testing.assert_close(one.compute_logprobs(batch), actor.compute_logprobs(batch),
                               atol=1e-5, rtol=1e-5)
    assert not torch.equal(actor.compute_logprobs(batch, 0.5), actor.compute_logprobs(batch))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prompts_run_once_and_give_the_row_by_row_logprobs(tiny_model_path, dist_info,
                                                                  plain_model, temperature):
    batch = make_group_batch(groups=3, size=4, seed=5)
    assert batch.attention_mask[:, 0].min() == 0  # some prompts are left-padded
    actor = Actor.from_pretrained(tiny_model_path, ActorConfig(micro_batch_size=12), dist_info)
    rows = []
    handle = actor.module.lm_head.register_forward_pre_hook(  # rows of hidden states it gets
        lambda m, args: rows.append(args[0].shape[0]))
    try:
        logp, ent = actor.compute_logprobs_and_entropy(batch, temperature)
    finally:
        handle.remove()
    assert rows == [3, 12]  # each distinct prompt once, then the 12 rows' response columns
    ref_logp, ref_ent = naive(plain_model, batch, temperature)
    torch.testing.assert_close(logp, ref_logp, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=2e-5, rtol=1e-5)


def test_shared_prompt_gradients_equal_the_row_by_row_sum(plain_model):
    batch = make_group_batch(groups=2, size=3, seed=6)
    weights = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(0))
    params = [p for p in plain_model.parameters()]

    def grads(rows):
        total = 0.0
        for sub in rows:
            logp, _ = policy_forward(plain_model, batch.select(sub))
            total = total + (logp * weights[sub]).sum()
        return torch.autograd.grad(total, params)

    shared = grads([list(range(len(batch)))])
    one_by_one = grads([[i] for i in range(len(batch))])
    for a, b in zip(shared, one_by_one):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert max(float(g.abs().max()) for g in shared) > 1e-3


def test_a_cache_the_model_ignores_raises_instead_of_scoring_without_the_prompt(
        actor, monkeypatch):
    # Under a keyword the model does not know (what `cache=` was before transformers 5.24), the
    # cache vanishes into **kwargs and stays empty: the responses would be scored without their
    # prompt. The path checks the cache's length and raises.
    import rlvr.hf_compat

    monkeypatch.setattr(rlvr.hf_compat, "cache_keyword", lambda model: "no_such_cache_keyword")
    with pytest.raises(RuntimeError, match="KV cache holds 0 columns"):
        actor.compute_logprobs(make_group_batch(groups=2, size=3, seed=7))


def test_the_cache_keyword_is_the_one_this_transformers_takes(plain_model):
    import inspect

    from rlvr.hf_compat import cache_keyword

    assert cache_keyword(plain_model) in inspect.signature(type(plain_model).forward).parameters


def test_shared_prompts_under_activation_checkpointing(tiny_model_path, dist_info, plain_model):
    # Checkpointing recomputes each layer in the backward, which would append the prompt's keys
    # to the cache a second time: training takes the plain forward, no-grad inference (where
    # checkpointing is off) still runs each prompt once.
    from learner_helpers import with_advantages

    from rlvr.learner import OptimConfig

    common = dict(optim=OptimConfig(lr=1e-3), micro_batch_size=12)
    plain = Actor.from_pretrained(tiny_model_path, ActorConfig(**common), dist_info)
    ckpt = Actor.from_pretrained(
        tiny_model_path, ActorConfig(activation_checkpointing=True, **common), dist_info)
    batch = with_advantages(make_group_batch(groups=3, size=4, seed=8), seed=8)
    rows = []
    handle = ckpt.module.lm_head.register_forward_pre_hook(lambda m, a: rows.append(a[0].shape[0]))
    try:
        logp = ckpt.compute_logprobs(batch)
    finally:
        handle.remove()
    assert rows == [3, 12]
    torch.testing.assert_close(logp, naive(plain_model, batch, 1.0)[0], atol=2e-5, rtol=1e-5)
    batch.set("old_logprobs", logp)
    assert ckpt.update(batch)["actor/grad_norm"] == pytest.approx(
        plain.update(batch)["actor/grad_norm"], rel=1e-5)
