from __future__ import annotations

import json

import pytest
import torch
from learner_helpers import global_batch, global_rel_diff, params, run_steps, two_rank_config
from transformers import AutoModelForCausalLM
from two_rank_worker import FULL_STEPS

from rlvr.learner import Actor, Checkpointer

STEPS = FULL_STEPS


@pytest.mark.slow
def test_two_gloo_ranks_follow_the_one_rank_trajectory(tiny_model_path, dist_info,
                                                       two_rank_runs):
    run_dir = two_rank_runs / "full"
    two = json.loads((run_dir / "metrics.json").read_text())

    actor = Actor.from_pretrained(tiny_model_path, two_rank_config(), dist_info)
    initial = params(actor.module)
    one = run_steps(actor, global_batch(), STEPS)
    for step, (a, b) in enumerate(zip(one, two)):
        for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy",
                    "actor/grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (step, key)
    assert one[-1]["actor/ppo_kl"] != 0.0  # the second epoch sees a moved policy

    exported = AutoModelForCausalLM.from_pretrained(run_dir / "export", dtype=torch.float32)
    one_rank = params(actor.module)
    assert global_rel_diff(dict(exported.named_parameters()), one_rank, initial) < 1e-4

    # The 2-rank sharded checkpoint loads into a 1-rank actor (resharded on load).
    resumed = Actor.from_pretrained(tiny_model_path, two_rank_config(), dist_info)
    Checkpointer({"actor": resumed}).load(run_dir / "ckpt" / f"step_{STEPS}")
    assert resumed.updates == STEPS
    assert global_rel_diff(params(resumed.module), one_rank, initial) < 1e-4
