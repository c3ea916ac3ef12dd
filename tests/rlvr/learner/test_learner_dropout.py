"""Dropout is off in the policy and critic during RL, without leaving training mode."""

from __future__ import annotations

import pytest
import torch
from learner_helpers import make_batch
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from rlvr.learner import Actor, ActorConfig, Critic, CriticConfig
from rlvr.learner.dropout import disable_dropout
from rlvr.learner.logprobs import policy_forward, value_forward


@pytest.fixture(scope="module")
def dropout_model(tiny_model_path, tmp_path_factory):
    """The tiny Qwen2 model saved with attention_dropout 0.5 (a float the attention reads)."""
    out = tmp_path_factory.mktemp("dropout_model")
    config = AutoConfig.from_pretrained(tiny_model_path, attention_dropout=0.5)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, config=config)
    model.save_pretrained(out)
    return out


def _twice(fn):
    torch.manual_seed(0)
    first = fn()
    torch.manual_seed(1)
    return first, fn()


def test_plain_model_with_dropout_is_noisy_in_train_mode(dropout_model):
    """The premise: without the fix two train-mode forwards of the same tokens differ."""
    model = AutoModelForCausalLM.from_pretrained(dropout_model).train()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        a, b = _twice(lambda: model(ids).logits)
    assert not torch.equal(a, b)


def test_actor_logprobs_are_identical_twice_in_train_mode(dropout_model, dist_info):
    actor = Actor.from_pretrained(dropout_model, ActorConfig(), dist_info)
    actor.module.train()  # as during update(); dropout must not act
    assert actor.module.training
    batch = make_batch(4, seed=0)
    with torch.no_grad():
        a, b = _twice(lambda: policy_forward(actor.module, batch, 1.0)[0])
    assert torch.equal(a, b)
    assert actor.module.config.attention_dropout == 0.0


def test_critic_values_are_identical_twice_in_train_mode(dropout_model, dist_info):
    critic = Critic.from_pretrained(dropout_model, CriticConfig(), dist_info)
    weight = critic.module.value_head.weight  # a zero head would hide any noise
    with torch.no_grad():
        (weight.to_local() if hasattr(weight, "to_local") else weight).normal_()
    critic.module.train()
    batch = make_batch(4, seed=1)
    with torch.no_grad():
        a, b = _twice(lambda: value_forward(critic.module, batch))
    assert torch.equal(a, b) and a.abs().sum() > 0


def test_dropout_modules_and_config_are_zeroed_in_place():
    """GPT-2 style: nn.Dropout modules (resid/embd/attn_pdrop) and config keys."""
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=16,
                        resid_pdrop=0.3, embd_pdrop=0.3, attn_pdrop=0.3)
    model = GPT2LMHeadModel(config).train()
    assert disable_dropout(model) > 0
    assert model.training  # the mode is left alone (activation checkpointing needs it)
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    assert (config.resid_pdrop, config.embd_pdrop, config.attn_pdrop) == (0.0, 0.0, 0.0)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        a, b = _twice(lambda: model(ids).logits)
    assert torch.equal(a, b)
    assert disable_dropout(model) == 0  # nothing left to change
