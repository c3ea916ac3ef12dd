"""The LLM agent: rollout engines and the multi-turn episode runner.

Typical use (one process, CPU)::

    engine = TransformersEngine(actor_module, tokenizer)          # shares the actor's weights
    runner = EpisodeRunner(engine, tokenizer, RunnerConfig(max_turns=4, sampling=SamplingParams()))
    trajs = runner.run([EpisodeSpec(env_id="rlvr/Math-v0", seed=i) for i in range(8)],
                       group_size=4, seed=step)
    batch = RolloutBatch.from_trajectories(trajs, tokenizer.pad_token_id)

``SGLangEngine`` (``agents.sglang_engine``) is the GPU engine; it is imported lazily here so that
importing ``agents`` never needs sglang.
"""

from __future__ import annotations

from typing import Any

from agents.chat import ChatRenderer
from agents.engine import Completion, Engine, SamplingParams
from agents.hf_engine import TransformersEngine
from agents.runner import (
    EpisodeRunner,
    EpisodeSpec,
    RunnerConfig,
    group_specs,
    run_episodes,
    turn_seed,
)

__all__ = [
    "ChatRenderer",
    "Completion",
    "Engine",
    "EpisodeRunner",
    "EpisodeSpec",
    "RunnerConfig",
    "SGLangEngine",
    "SamplingParams",
    "TransformersEngine",
    "group_specs",
    "run_episodes",
    "turn_seed",
]


def __getattr__(name: str) -> Any:
    if name == "SGLangEngine":
        from agents.sglang_engine import SGLangEngine

        return SGLangEngine
    raise AttributeError(f"module 'agents' has no attribute {name!r}")
