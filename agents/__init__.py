"""The LLM agent: rollout engines and the multi-turn episode runner.

Typical use (one process, CPU)::

    engine = TransformersEngine(actor_module, tokenizer)          # shares the actor's weights
    runner = EpisodeRunner(engine, tokenizer, RunnerConfig(max_turns=4, sampling=SamplingParams()))
    trajs = runner.run([EpisodeSpec(env_id="rlvr/Math-v0", seed=i) for i in range(8)],
                       group_size=4, seed=step)
    batch = RolloutBatch.from_trajectories(trajs, tokenizer.pad_token_id)

``SGLangEngine`` (``rlvr.agents.sglang``) is the GPU engine. Every name here is imported lazily, on
first use, so importing ``agents`` (or one engine module) never needs sglang, gymnasium or
jsonschema.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlvr.agents.chat import ChatRenderer
    from rlvr.agents.engine import Completion, Engine, SamplingParams
    from rlvr.agents.hf.engine import TransformersEngine
    from rlvr.agents.runner import (
        EpisodeRunner,
        EpisodeSpec,
        RunnerConfig,
        group_specs,
        run_episodes,
        turn_seed,
    )
    from rlvr.agents.sglang import SGLangEngine

_WHERE = {
    "ChatRenderer": "rlvr.agents.chat",
    "Completion": "rlvr.agents.engine",
    "Engine": "rlvr.agents.engine",
    "SamplingParams": "rlvr.agents.engine",
    "TransformersEngine": "rlvr.agents.hf.engine",
    "EpisodeRunner": "rlvr.agents.runner",
    "EpisodeSpec": "rlvr.agents.runner",
    "RunnerConfig": "rlvr.agents.runner",
    "group_specs": "rlvr.agents.runner",
    "run_episodes": "rlvr.agents.runner",
    "turn_seed": "rlvr.agents.runner",
    "SGLangEngine": "rlvr.agents.sglang",
}
"""Where each name lives: imported on first use, so that importing one engine (e.g. the GPU
check's ``rlvr.agents.hf.engine``) needs neither gymnasium, jsonschema nor sglang."""

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
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rlvr.agents' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

if __name__ != "rlvr.agents":  # this folder installs and imports as rlvr.agents only
    raise ImportError(
        f"rlvr's agents package imports as `rlvr.agents`, not as `{__name__}`: write "
        f"`from rlvr.agents import ...` (a second copy of its modules would split their state)")
