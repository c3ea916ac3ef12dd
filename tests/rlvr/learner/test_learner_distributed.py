from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from learner_helpers import global_batch, global_rel_diff, params, run_steps, two_rank_config
from transformers import AutoModelForCausalLM

from rlvr.learner import Actor, Checkpointer

STEPS = 3


@pytest.mark.slow
def test_two_gloo_ranks_follow_the_one_rank_trajectory(tiny_model_path, dist_info, tmp_path,
                                                       run_process_group):
    worker = Path(__file__).parent / "two_rank_worker.py"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = run_process_group(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(worker), str(tmp_path), str(tiny_model_path), str(STEPS)],
        env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    two = json.loads((tmp_path / "metrics.json").read_text())

    actor = Actor.from_pretrained(tiny_model_path, two_rank_config(), dist_info)
    initial = params(actor.module)
    one = run_steps(actor, global_batch(), STEPS)
    for step, (a, b) in enumerate(zip(one, two)):
        for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy",
                    "actor/grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (step, key)
    assert one[-1]["actor/ppo_kl"] != 0.0  # the second epoch sees a moved policy

    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "export", dtype=torch.float32)
    one_rank = params(actor.module)
    assert global_rel_diff(dict(exported.named_parameters()), one_rank, initial) < 1e-4

    # The 2-rank sharded checkpoint loads into a 1-rank actor (resharded on load).
    resumed = Actor.from_pretrained(tiny_model_path, two_rank_config(), dist_info)
    Checkpointer({"actor": resumed}).load(tmp_path / "ckpt" / f"step_{STEPS}")
    assert resumed.updates == STEPS
    assert global_rel_diff(params(resumed.module), one_rank, initial) < 1e-4
