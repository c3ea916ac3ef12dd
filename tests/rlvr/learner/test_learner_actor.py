from __future__ import annotations

import pytest
import torch
from learner_helpers import (
    global_rel_diff,
    make_batch,
    make_group_batch,
    max_rel_diff,
    params,
    with_advantages,
)
from transformers import AutoModelForCausalLM

from rlvr.errors import BatchError
from rlvr.learner import Actor, ActorConfig, OptimConfig, Reference


def prepared(actor, rows=8, seed=0):
    """A batch with old logprobs perturbed away from the current ones (so clipping engages)."""
    batch = with_advantages(make_batch(rows, seed=seed), seed=seed)
    g = torch.Generator().manual_seed(seed + 100)
    old = actor.compute_logprobs(batch) + 0.3 * torch.randn(batch.response_mask.shape, generator=g)
    batch.set("old_logprobs", old * batch.response_mask)
    return batch


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "token-sum"])
def test_micro_batch_accumulation_equals_one_big_batch(tiny_model_path, dist_info, agg):
    # eps=1 makes Adam's first step ~ lr * grad (no sign-like amplification of rounding noise),
    # so the parameter change compares the accumulated gradients themselves.
    common = dict(optim=OptimConfig(lr=1.0, eps=1.0, grad_clip=0.0), loss_agg=agg,
                  entropy_coef=0.01)
    small = Actor.from_pretrained(tiny_model_path, ActorConfig(micro_batch_size=3, **common),
                                  dist_info)
    big = Actor.from_pretrained(tiny_model_path, ActorConfig(micro_batch_size=64, **common),
                                dist_info)
    batch = prepared(small)
    start = params(small.module)
    m_small, m_big = small.update(batch), big.update(batch)
    assert m_small["actor/pg_clipfrac"] > 0
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy",
                "actor/grad_norm"):
        assert m_small[key] == pytest.approx(m_big[key], rel=1e-5, abs=1e-7), key
    delta_small = {k: v - start[k] for k, v in params(small.module).items()}
    delta_big = {k: v - start[k] for k, v in params(big.module).items()}
    assert max(float(d.abs().max()) for d in delta_big.values()) > 1e-3
    assert max_rel_diff(delta_small, delta_big) < 1e-4


def test_update_metrics_and_lr_warmup(tiny_model_path, dist_info):
    cfg = ActorConfig(optim=OptimConfig(lr=1e-3, warmup_steps=1), micro_batch_size=4,
                        mini_batch_size=4, epochs=2)
    actor = Actor.from_pretrained(tiny_model_path, cfg, dist_info)
    batch = prepared(actor)
    m1 = actor.update(batch)
    m2 = actor.update(batch)
    expected = {"actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl",
                "actor/entropy", "actor/grad_norm", "actor/lr", "actor/skipped_steps"}
    assert expected <= set(m1)
    assert m1["actor/lr"] == pytest.approx(5e-4) and m2["actor/lr"] == pytest.approx(1e-3)
    assert actor.updates == 2 and not actor.module.training


def test_positive_advantages_raise_the_logprobs(tiny_model_path, dist_info):
    cfg = ActorConfig(optim=OptimConfig(lr=3e-3), micro_batch_size=8)
    actor = Actor.from_pretrained(tiny_model_path, cfg, dist_info)
    batch = make_batch(8, seed=4)
    batch.set("advantages", batch.response_mask.clone())
    before = actor.compute_logprobs(batch)
    for _ in range(3):
        batch.set("old_logprobs", actor.compute_logprobs(batch))
        actor.update(batch)
    after = actor.compute_logprobs(batch)
    mask = batch.response_mask.bool()
    assert after[mask].mean() > before[mask].mean() + 0.1


def test_kl_loss_entropy_bonus_and_tis_paths(tiny_model_path, dist_info):
    cfg = ActorConfig(optim=OptimConfig(lr=1e-3), micro_batch_size=4, kl_loss_coef=0.1,
                        kl_loss_estimator="low_var_kl", entropy_coef=0.01, tis_cap=2.0)
    actor = Actor.from_pretrained(tiny_model_path, cfg, dist_info)
    ref = Reference.from_pretrained(tiny_model_path, cfg, dist_info)
    batch = prepared(actor)
    with pytest.raises(BatchError, match="ref_logprobs is not set"):
        actor.update(batch)
    batch.set("ref_logprobs", ref.compute_logprobs(batch))
    m1 = actor.update(batch)
    assert m1["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # still equal to the reference
    assert 0 < m1["actor/tis_weight_mean"] <= 2.0
    m2 = actor.update(batch)
    assert m2["actor/kl_loss"] > 1e-6
    assert all(torch.isfinite(torch.tensor(v)) for v in m2.values())


@pytest.mark.parametrize("shape", [{"epochs": 2}, {"mini_batch_size": 2}])
def test_update_requires_old_logprobs_and_advantages(tiny_model_path, dist_info, shape):
    actor = Actor.from_pretrained(tiny_model_path, ActorConfig(**shape), dist_info)
    batch = make_batch(4)
    assert not actor.single_step(4)
    with pytest.raises(BatchError, match="old_logprobs is not set on this batch; only a one-step"):
        actor.update(batch)
    # not one step: stage B computes the old logprobs and measures the mismatch
    assert set(actor.set_old_logprobs(batch)) == {"rollout/logprob_diff", "rollout/kl"}
    torch.testing.assert_close(batch.old_logprobs, actor.compute_logprobs(batch), atol=0, rtol=0)
    with pytest.raises(BatchError, match="advantages is not set"):
        actor.update(batch)


@pytest.mark.parametrize("tis_cap", [None, 2.0])
def test_one_step_update_takes_old_logprobs_from_its_own_forward(tiny_model_path, dist_info,
                                                                 tis_cap):
    cfg = ActorConfig(optim=OptimConfig(lr=1e-3), micro_batch_size=3, mini_batch_size=8,
                        tis_cap=tis_cap)
    fused, separate = (Actor.from_pretrained(tiny_model_path, cfg, dist_info) for _ in range(2))
    assert fused.single_step(8) and not fused.single_step(9)
    start = params(fused.module)
    batch = with_advantages(make_batch(8, seed=2), seed=2)
    old = separate.compute_logprobs(batch)
    assert fused.set_old_logprobs(batch) == {} and batch.old_logprobs is None  # the fast path
    m_fused = fused.update(batch)
    assert batch.old_logprobs is None
    m_stage_b = separate.set_old_logprobs(batch, needed_before_update=True)  # e.g. KL in reward
    torch.testing.assert_close(batch.old_logprobs, old, atol=0, rtol=0)
    m_separate = separate.update(batch)
    for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/pg_clipfrac"):
        assert m_fused[key] == pytest.approx(m_separate[key], rel=1e-5, abs=1e-7), key
    assert m_fused["actor/ppo_kl"] == 0.0
    if tis_cap is not None:
        assert m_fused["actor/tis_weight_mean"] == pytest.approx(
            m_separate["actor/tis_weight_mean"], rel=1e-5)
    delta_f = {k: v - start[k] for k, v in params(fused.module).items()}
    delta_s = {k: v - start[k] for k, v in params(separate.module).items()}
    assert global_rel_diff(params(fused.module), params(separate.module), start) < 1e-4
    assert max(float(d.abs().max()) for d in delta_f.values()) > 1e-4
    assert max(float(d.abs().max()) for d in delta_s.values()) > 1e-4
    # the rollout mismatch is measured from the same forward (token means over the mask)
    mask = batch.response_mask.bool()
    diff = (old - batch.rollout_logprobs)[mask]
    assert m_fused["rollout/logprob_diff"] == pytest.approx(float(diff.abs().mean()), rel=1e-5)
    k3 = (torch.exp(diff) - diff - 1).mean()
    assert m_fused["rollout/kl"] == pytest.approx(float(k3), rel=1e-4)
    assert "rollout/logprob_diff" not in m_separate
    # stage B measures the same mismatch when it computes the old logprobs itself
    assert m_stage_b["rollout/logprob_diff"] == pytest.approx(float(diff.abs().mean()), rel=1e-5)
    assert m_stage_b["rollout/kl"] == pytest.approx(float(k3), rel=1e-4)


def test_reference_is_frozen_and_matches_the_initial_policy(tiny_model_path, dist_info):
    cfg = ActorConfig(micro_batch_size=4)
    ref = Reference.from_pretrained(tiny_model_path, cfg, dist_info)
    actor = Actor.from_pretrained(tiny_model_path, cfg, dist_info)
    assert all(not p.requires_grad for p in ref.module.parameters())
    assert not hasattr(ref, "optimizer")
    batch = make_batch(5, seed=5)
    out = ref.compute_logprobs(batch)
    assert out.grad_fn is None and not out.requires_grad
    torch.testing.assert_close(out, actor.compute_logprobs(batch), atol=0, rtol=0)


def test_activation_checkpointing_gives_the_same_update(tiny_model_path, dist_info):
    common = dict(optim=OptimConfig(lr=1e-3), micro_batch_size=4)
    plain = Actor.from_pretrained(tiny_model_path, ActorConfig(**common), dist_info)
    ckpt = Actor.from_pretrained(
        tiny_model_path, ActorConfig(activation_checkpointing=True, **common), dist_info
    )
    batch = prepared(plain)
    calls = {"plain": 0, "ckpt": 0}
    for name, actor in (("plain", plain), ("ckpt", ckpt)):
        def count(*_, name=name):
            calls[name] += 1
        actor.module.model.layers[0].self_attn.register_forward_pre_hook(count)
    assert plain.update(batch)["actor/grad_norm"] == pytest.approx(
        ckpt.update(batch)["actor/grad_norm"], rel=1e-6)
    assert calls["ckpt"] == 2 * calls["plain"] > 0  # the backward recomputed each layer
    assert max_rel_diff(params(plain.module), params(ckpt.module)) < 1e-6


def test_sharded_module_generates_like_plain_transformers(tiny_model_path, dist_info):
    actor = Actor.from_pretrained(tiny_model_path, ActorConfig(), dist_info)
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    ids = torch.tensor([[0, 0, 5, 17, 42], [3, 9, 27, 81, 243]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        ours = actor.module.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6,
                                     do_sample=False, pad_token_id=0)
        theirs = plain.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6,
                                do_sample=False, pad_token_id=0)
    assert torch.equal(ours, theirs)
    with torch.no_grad(), actor.gathered() as module:
        gathered = module.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6,
                                   do_sample=False, pad_token_id=0)
    assert torch.equal(gathered, theirs)
    full = dict(actor.named_full_tensors())
    reference = plain.state_dict()
    assert set(full) == set(reference) - {"lm_head.weight"}  # tied: sent once, as the embedding
    assert all(torch.equal(full[k], reference[k]) for k in full)
    # Training after generating (resharded on exit) matches training a fresh actor.
    fresh = Actor.from_pretrained(tiny_model_path, ActorConfig(), dist_info)
    batch = prepared(fresh)
    actor.update(batch)
    fresh.update(batch)
    a, b = params(actor.module), params(fresh.module)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_update_on_shared_prompts_equals_the_row_by_row_update(tiny_model_path, dist_info):
    common = dict(optim=OptimConfig(lr=1e-3), entropy_coef=0.01)
    shared = Actor.from_pretrained(tiny_model_path, ActorConfig(micro_batch_size=12, **common),
                                   dist_info)
    rows = Actor.from_pretrained(tiny_model_path, ActorConfig(micro_batch_size=1, **common),
                                 dist_info)
    start = params(shared.module)
    batch = with_advantages(make_group_batch(groups=3, size=4, seed=7), seed=7)
    m_shared, m_rows = shared.update(batch), rows.update(batch)
    for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm"):
        assert m_shared[key] == pytest.approx(m_rows[key], rel=1e-5, abs=1e-7), key
    assert global_rel_diff(params(shared.module), params(rows.module), start) < 1e-4


def test_a_step_with_zero_gradient_leaves_weights_and_adam_state_alone(tiny_model_path,
                                                                       dist_info):
    # After one real step Adam holds moments; a batch whose advantages are all 0 (every group's
    # rewards equal) has a zero gradient. Stepping on it would still move each parameter by
    # about lr * m / sqrt(v) (0.67 lr on the second step) and decay the moments: a drift with
    # no learning signal, seen as entropy rising at grad_norm 0 in the tool quickstart.
    cfg = ActorConfig(optim=OptimConfig(lr=1e-3), micro_batch_size=8)
    actor = Actor.from_pretrained(tiny_model_path, cfg, dist_info)
    actor.update(with_advantages(make_batch(8, seed=5), seed=5))
    state = {k: {n: v.clone() for n, v in s.items() if torch.is_tensor(v)}
             for k, s in actor.optimizer.state.items()}
    before = params(actor.module)
    zero = make_batch(8, seed=6)
    zero.set("advantages", torch.zeros_like(zero.response_mask, dtype=torch.float))
    metrics = actor.update(zero)
    assert metrics["actor/grad_norm"] == 0.0 and metrics["actor/skipped_steps"] == 0.0
    after = params(actor.module)
    assert all(torch.equal(before[k], after[k]) for k in before)
    for key, tensors in state.items():
        for name, value in tensors.items():
            assert torch.equal(actor.optimizer.state[key][name], value), name
    actor.update(with_advantages(make_batch(8, seed=7), seed=7))  # a real step still moves
    assert any(not torch.equal(after[k], v) for k, v in params(actor.module).items())
