"""``mini_batch_size`` counts prompts, as verl's ``ppo_mini_batch_size`` does.

A number copied from a verl config means the same thing here: prompts per optimizer step over
all ranks, each bringing its ``rollout.group_size`` sequences. A number that only makes sense as
sequences (the old unit) is rejected with a message that says what to write instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from learner_helpers import make_batch, params, with_advantages

from rlvr.config import load_config
from rlvr.errors import ConfigError
from rlvr.learner import Actor, ActorConfig, OptimConfig

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def test_a_verl_number_counts_prompts():
    # verl: data.train_batch_size=16, rollout.n=8, actor.ppo_mini_batch_size=4
    config = load_config(CONFIGS / "quickstart.yaml", ["actor.mini_batch_size=4"])
    assert (config.rollout.prompts_per_step, config.rollout.group_size) == (16, 8)
    actor, critic = config.learner_configs()
    assert (actor.mini_batch_size, actor.group_size, actor.mini_batch_sequences) == (4, 8, 32)
    assert critic.group_size == 8 and critic.mini_batch_sequences is None


def test_a_count_of_sequences_is_rejected_saying_what_to_write():
    with pytest.raises(ConfigError, match=r"actor.mini_batch_size \(64\) counts prompts.*If 64 "
                                          r"was meant as sequences, write "
                                          r"actor.mini_batch_size=8 \(prompts\)"):
        load_config(CONFIGS / "quickstart.yaml", ["actor.mini_batch_size=64"])
    with pytest.raises(ConfigError, match=r"critic.mini_batch_size \(3\) counts prompts"):
        load_config(CONFIGS / "ppo_gae_quickstart.yaml", ["critic.mini_batch_size=3"])
    with pytest.raises(ConfigError, match=r"actor.group_size is set from rollout.group_size"):
        load_config(CONFIGS / "quickstart.yaml", ["actor.group_size=2"])


def test_shipped_gpu_configs_keep_their_sequences_per_step():
    """The GPU configs were rewritten in prompts; the optimizer still sees as many sequences."""
    expected = {"qwen2.5-0.5b_gsm8k_grpo.yaml": 256, "qwen2.5-1.5b_code_grpo.yaml": 128,
                "qwen2.5-1.5b_gsm8k_ppo.yaml": 64}
    for name, sequences in expected.items():
        actor, _ = load_config(CONFIGS / "gpu" / name).learner_configs()
        assert actor.mini_batch_sequences == sequences, name


def test_learner_steps_on_prompts_times_group_size(tiny_model_path, dist_info):
    """2 prompts x group 4 is one optimizer step per 8 rows: the same update as 8 x 1."""
    def trained(**shape):
        cfg = ActorConfig(optim=OptimConfig(lr=1e-3), micro_batch_size=4, **shape)
        actor = Actor.from_pretrained(tiny_model_path, cfg, dist_info)
        batch = with_advantages(make_batch(16, seed=3), seed=3)
        batch.set("old_logprobs", actor.compute_logprobs(batch))
        assert not actor.single_step(16)
        actor.update(batch)
        return params(actor.module)

    grouped, rows, smaller = (trained(mini_batch_size=2, group_size=4),
                              trained(mini_batch_size=8),
                              trained(mini_batch_size=2))
    assert all(torch.equal(grouped[k], rows[k]) for k in grouped)
    assert not all(torch.equal(grouped[k], smaller[k]) for k in grouped)
