"""A reward outside the env's reward_range, or not an int/float, ends its episode as an error
with the reason, and the episode is never trained on (like a NaN, inf or None reward)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from agent_helpers import EchoToolEnv

from rlvr.agents.engine import SamplingParams
from rlvr.agents.runner import EpisodeSpec, RunnerConfig, run_episodes
from rlvr.batch import RolloutBatch


class FixedReward(EchoToolEnv):
    """One turn, then the given reward; declares rewards in [0, 1]."""

    reward_range = (0.0, 1.0)

    def __init__(self, reward: Any) -> None:
        super().__init__(n_turns=1)
        self.reward = reward

    def step(self, action: str):
        return [], self.reward, True, False, {}


CASES = [("1.0", r"reward must be an int or a float; got str '1.0'"),
         (1e6, r"reward 1000000.0 is outside the env's reward_range \(0.0, 1.0\)"),
         (-0.5, r"outside the env's reward_range"),
         (True, r"got bool True"),
         (None, r"got NoneType None"),
         (float("nan"), r"must be finite")]


def test_out_of_range_or_wrongly_typed_rewards_are_error_episodes(engine, tiny_tokenizer,
                                                                  frequent_stops):
    specs = [EpisodeSpec(env_factory=lambda r=r: FixedReward(r), seed=i)
             for i, (r, _) in enumerate([*CASES, (0.5, "")])]
    cfg = RunnerConfig(max_turns=1, max_tokens_per_turn=40, max_response_tokens=64, seed=1,
                       sampling=SamplingParams(temperature=1.0, stop_token_ids=frequent_stops))
    trajs = run_episodes(engine, tiny_tokenizer, specs, cfg)
    for traj, (_, reason) in zip(trajs[:-1], CASES):
        assert traj.finish_reason == "error", (reason, traj.finish_reason)
        assert pytest.approx(0.0) == traj.reward
        assert re.search(reason, traj.outcome.error), (reason, traj.outcome.error)
    assert trajs[-1].finish_reason == "stop" and trajs[-1].reward == 0.5
    batch = RolloutBatch.from_trajectories(trajs, tiny_tokenizer.pad_token_id)
    assert batch.valid.tolist() == [False] * len(CASES) + [True]
