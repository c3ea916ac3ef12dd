from __future__ import annotations

import pytest
import torch
from learner_helpers import make_batch, with_advantages

from rlvr.errors import BatchError
from rlvr.learner import Critic, CriticConfig, CriticModel, OptimConfig


@pytest.fixture
def critic(tiny_model_path, dist_info):
    cfg = CriticConfig(optim=OptimConfig(lr=3e-3), micro_batch_size=3, mini_batch_size=4)
    return Critic.from_pretrained(tiny_model_path, cfg, dist_info)


def test_values_shape_masking_and_zero_init(critic):
    batch = make_batch(7, seed=6)
    values = critic.compute_values(batch)
    assert values.shape == batch.response_mask.shape and values.dtype == torch.float32
    assert values.grad_fn is None
    assert torch.count_nonzero(values) == 0  # zero-initialised value head


def test_update_fits_the_returns_and_reports_metrics(critic):
    batch = make_batch(8, seed=7)
    batch.set("returns", batch.response_mask.clone())  # a target the critic can fit quickly
    with pytest.raises(BatchError, match="values is not set"):
        critic.update(batch)
    losses = []
    for _ in range(5):
        batch.set("values", critic.compute_values(batch))
        metrics = critic.update(batch)
        losses.append(metrics["critic/vf_loss"])
    assert {"critic/vf_loss", "critic/vf_clipfrac", "critic/grad_norm", "critic/lr"} <= set(metrics)
    assert losses[-1] < 0.5 * losses[0]
    values = critic.compute_values(batch)
    masked = values[batch.response_mask == 0]
    assert torch.count_nonzero(values[batch.response_mask == 1]) > 0
    assert torch.equal(masked, torch.zeros_like(masked))


def test_value_of_token_j_is_the_head_on_the_hidden_state_before_it(critic, tiny_model_path):
    batch = with_advantages(make_batch(6, seed=8))
    batch.set("values", critic.compute_values(batch))
    critic.update(batch)  # the head is no longer zero
    plain = CriticModel.from_pretrained(tiny_model_path, torch.device("cpu"))
    plain.load_state_dict(dict(critic.named_full_tensors()))
    values = critic.compute_values(batch)
    p = batch.prompt_len
    with torch.no_grad():
        for i in range(len(batch)):
            keep = batch.attention_mask[i].bool()
            row = plain(batch.input_ids[i][keep][None], torch.ones(1, int(keep.sum())),
                        torch.arange(int(keep.sum()))[None])[0]
            n_prompt = int(batch.attention_mask[i, :p].sum())
            n_resp = int(batch.attention_mask[i, p:].sum())
            expected = row[n_prompt - 1 : n_prompt - 1 + n_resp] * batch.response_mask[i, :n_resp]
            torch.testing.assert_close(values[i, :n_resp], expected, atol=1e-5, rtol=1e-5)
