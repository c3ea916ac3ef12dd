"""An env's own measurements (``info["metrics"]``) reach the training metrics as ``env/<name>``."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.agents.episode_state import EpisodeState
from rlvr.agents.runner_config import EpisodeSpec
from rlvr.metrics import env_metrics, rollout_metrics
from rlvr.trajectory import EpisodeOutcome, Trajectory


def _traj(metrics: dict[str, float], finish: str = "stop") -> Trajectory:
    return Trajectory(prompt_ids=[1], response_ids=[2], response_mask=[1], rollout_logprobs=[0.0],
                      token_level_scores=[0.0], finish_reason=finish,
                      outcome=EpisodeOutcome(turns=1, metrics=metrics))


def test_the_last_step_with_metrics_keeps_only_finite_numbers():
    state = EpisodeState(spec=EpisodeSpec(env_id="x"), env_id="x")
    state.note_step("a", [], {"metrics": {"early": 1.0}})
    state.note_step("b", [], {})  # a step without metrics keeps the last ones
    assert state.env_metrics == {"early": 1.0}
    state.note_step("c", [], {"metrics": {"correct": 1, "chars": 3.5, "flag": True,
                                          "nan": math.nan, "text": "x", 7: 2.0}})
    assert state.env_metrics == {"correct": 1.0, "chars": 3.5, "7": 2.0}
    state.finish_reason = "stop"
    assert state.to_trajectory(pad_id=0).outcome.metrics == {"correct": 1.0, "chars": 3.5,
                                                             "7": 2.0}


def test_env_metrics_are_means_over_the_episodes_that_gave_them():
    trajs = [_traj({"correct": 1.0, "chars": 4.0}), _traj({"correct": 0.0}),
             _traj({"correct": 1.0, "chars": 8.0}), _traj({}),
             _traj({"correct": 0.0, "chars": 100.0}, finish="error")]  # not counted
    got = env_metrics(trajs, torch.device("cpu"))
    assert got == {"env/correct": pytest.approx(2 / 3), "env/chars": pytest.approx(6.0)}
    assert rollout_metrics(trajs, torch.device("cpu"))["env/chars"] == pytest.approx(6.0)
    assert env_metrics([_traj({})], torch.device("cpu")) == {}
