"""A real pretrained model trains: SmolLM2-135M-Instruct from its .gguf file, two GRPO steps.

``model.path`` is the .gguf file itself (imported once into the cache). The episodes are
multi-turn (a wrong answer gets feedback and another try) on the real BPE tokenizer and chat
template, each checked token-exact; the first step's update changes the weights (an entropy
bonus makes its gradient non-zero whatever the rewards), and the second step's rollout, sampled
by the engine after that update, agrees with the learner's recomputation under the sync guard.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_helpers import QUIET

from rlvr.config import load_config
from rlvr.trainer import train
from rlvr.training.sync_guard import default_limit

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "smollm2_quickstart.yaml"


@pytest.mark.slow
def test_smollm2_trains_token_exact_multi_turn_episodes_with_the_sync_proven(smollm2_gguf,
                                                                           tmp_path):
    import torch

    overrides = [
        f"model.path={smollm2_gguf}", f"trainer.output_dir={tmp_path / 'run'}",
        "sft.enabled=false", "trainer.steps=2", "trainer.threads=2", "eval.every=0",
        "eval.tasks=2", "eval.max_new_tokens=4", "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.runner.max_turns=2", "rollout.runner.max_tokens_per_turn=12",
        "rollout.runner.max_response_tokens=48", "rollout.runner.check_token_exact=true",
        "env.kwargs.max_attempts=2", "actor.entropy_coef=0.01", "actor.optim.lr=1e-5",
        "actor.micro_batch_size=4", *QUIET,
        # the model's first sentence is its answer: a turn that ends there reaches the env
        # (a turn cut off by the token budget never does), so wrong answers get a retry
        'rollout.runner.sampling.stop=[".", "\n"]',
    ]
    config = load_config(CONFIG, overrides)
    result = train(config, log=lambda *_: None)
    first, second = result.history
    assert first["actor/grad_norm"] > 0  # a real update
    turns = [m["response/turns_mean"] for m in result.history]
    assert max(turns) > 1, turns  # multi-turn: a wrong answer got feedback and another try
    # the engine sampled step 2 with the updated weights: the guard's gap, measured
    assert second["rollout/logprob_diff"] < min(1e-4, default_limit(torch.float32))
