"""``seq-mean-token-sum-norm`` (Dr. GRPO) divides by a constant, never by a padded width."""

from __future__ import annotations

import pytest
import torch
from learner_helpers import make_batch, max_rel_diff, params

from rlvr.config import TrainConfig
from rlvr.errors import ConfigError
from rlvr.learner import Actor, ActorConfig, OptimConfig

SCALE = 16.0


def row_advantages(batch, seed=0):
    """One advantage per row, on every valid token (what GRPO gives)."""
    g = torch.Generator().manual_seed(seed)
    per_row = torch.randn(len(batch), 1, generator=g)
    batch.set("advantages", per_row * batch.response_mask)
    return per_row.squeeze(-1)


def known_pg_loss(batch, per_row):
    """On-policy (ratio 1) the token loss is -A: sum_i(-A_i n_i) / (rows with tokens * SCALE)."""
    n = batch.response_mask.sum(dim=-1)
    return float((-per_row * n).sum() / ((n > 0).sum() * SCALE))


def norm_actor(path, dist_info, micro):
    cfg = ActorConfig(optim=OptimConfig(lr=1.0, eps=1.0, grad_clip=0.0), micro_batch_size=micro,
                        loss_agg="seq-mean-token-sum-norm", loss_scale_factor=SCALE)
    return Actor.from_pretrained(path, cfg, dist_info)


def test_the_normaliser_is_the_constant_whatever_the_padding_and_micro_batches(
        tiny_model_path, dist_info):
    # The same 6 rows collated at their longest width (8) and padded to 13 and 24 columns, and
    # split into micro-batches of 1, 4 and 64 rows: the loss is the known answer every time, and
    # the gradient (the first Adam step with eps=1 is ~ lr * grad) is the same.
    deltas, losses = [], []
    for width, micro in ((None, 64), (13, 4), (24, 1)):
        batch = make_batch(6, seed=3, max_response_len=width)
        per_row = row_advantages(batch)
        actor = norm_actor(tiny_model_path, dist_info, micro)
        start = params(actor.module)
        metrics = actor.update(batch)  # no old_logprobs: on-policy, ratio exactly 1
        losses.append((metrics["actor/pg_loss"], known_pg_loss(batch, per_row),
                       batch.response_len))
        deltas.append({k: v - start[k] for k, v in params(actor.module).items()})
    assert [r for *_, r in losses] == [8, 13, 24]
    for got, want, _ in losses:
        assert got == pytest.approx(want, rel=1e-5, abs=1e-7)
    # The old rule (divide by the padded width) would have given three different losses.
    assert losses[0][1] * SCALE / 8 != pytest.approx(losses[1][1] * SCALE / 13, rel=1e-3)
    assert max(float(d.abs().max()) for d in deltas[0].values()) > 1e-4
    for other in deltas[1:]:
        assert max_rel_diff(other, deltas[0]) < 1e-4


def test_the_normaliser_is_the_same_at_every_step(tiny_model_path, dist_info):
    actor = norm_actor(tiny_model_path, dist_info, 4)
    for step, width in enumerate((None, 20, 11)):
        batch = make_batch(5, seed=10 + step, max_response_len=width)
        per_row = row_advantages(batch, seed=step)
        got = actor.update(batch)["actor/pg_loss"]
        assert got == pytest.approx(known_pg_loss(batch, per_row), rel=1e-5, abs=1e-7), step


def test_the_mode_needs_its_constant(tiny_model_path, dist_info):
    cfg = ActorConfig(loss_agg="seq-mean-token-sum-norm")
    with pytest.raises(ConfigError, match="loss_scale_factor must be set"):
        Actor.from_pretrained(tiny_model_path, cfg, dist_info)
    with pytest.raises(ConfigError, match="^loss_scale_factor must be > 0 or null"):
        ActorConfig(loss_scale_factor=0.0)


def test_rlvr_train_defaults_it_to_the_maximum_response_length():
    cfg = TrainConfig()
    cfg.actor = ActorConfig(loss_agg="seq-mean-token-sum-norm")
    actor, critic = cfg.learner_configs()
    assert actor.loss_scale_factor == float(cfg.rollout.runner.max_response_tokens)
    assert critic.loss_scale_factor == float(cfg.rollout.runner.max_response_tokens)
    cfg.actor = ActorConfig(loss_agg="seq-mean-token-sum-norm", loss_scale_factor=3.0)
    assert cfg.learner_configs()[0].loss_scale_factor == 3.0
