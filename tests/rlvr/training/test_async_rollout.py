"""Policy versions, staleness and the asynchronous producer's bookkeeping (no model needed)."""

from __future__ import annotations

import time

import pytest
import torch

from rlvr.batch import RolloutBatch
from rlvr.errors import BatchError
from rlvr.training.async_rollout import AsyncRollout, AsyncRolloutError, fresh_mismatch
from rlvr.training.versions import oldest_version, split_stale, staleness, stamp
from rlvr.trajectory import Trajectory

ROWS = 4


def _traj(n: int = 3, versions: list[int] | None = None, mask: list[int] | None = None,
          tag: object = None) -> Trajectory:
    return Trajectory(prompt_ids=[1, 2], response_ids=[5] * n, response_mask=mask or [1] * n,
                      rollout_logprobs=[-0.5] * n, token_level_scores=[0.0] * n, group_id=tag,
                      policy_versions=versions)


def test_staleness_is_the_oldest_model_token():
    t = _traj(4, versions=[7, 3, 5, 6], mask=[1, 0, 1, 1])  # the env token (v3) does not count
    assert oldest_version(t, 9) == 5 and staleness(t, 9) == 4
    assert staleness(_traj(), 9) == 0  # no versions recorded: all current
    kept, dropped, ages = split_stale([t, _traj(3, [8, 9, 9]), _traj(3, [9, 9, 9])], 9, 1)
    assert dropped == [t] and ages == [1, 0] and len(kept) == 2


def test_stamp_keeps_recorded_versions():
    a, b = _traj(2), _traj(2, versions=[1, 2])
    stamp([a, b], 4)
    assert a.policy_versions == [4, 4] and b.policy_versions == [1, 2]


def test_versions_collate_and_are_checked():
    batch = RolloutBatch.from_trajectories([_traj(2, [3, 4]), _traj(3, [1, 1, 2])], 0)
    assert batch.policy_versions is not None
    assert batch.policy_versions.tolist() == [[3, 4, 0], [1, 1, 2]]
    assert batch.select([1]).policy_versions.tolist() == [[1, 1, 2]]
    assert RolloutBatch.from_trajectories([_traj()], 0).policy_versions is None
    with pytest.raises(BatchError, match="row 1: policy_versions is None"):
        RolloutBatch.from_trajectories([_traj(2, [1, 1]), _traj(2)], 0)
    with pytest.raises(BatchError, match="row 0: policy_versions has 1 entries"):
        RolloutBatch.from_trajectories([_traj(2, [1])], 0)


class _Run:
    """A producer over a recording ``collect`` and a learner loop that publishes each version."""

    def __init__(self, k: int, steps: int, rows=None) -> None:
        self.calls: list[tuple[int, int, int]] = []  # (step, position, published version then)
        self.loaded: list[float] = []
        self.rows = rows or (lambda step: [_traj(tag=(step, i)) for i in range(ROWS)])
        self.producer = AsyncRollout(self.collect, self.load, max_staleness=k, first_step=1,
                                     last_step=steps, first_position=10, prompts_per_step=2,
                                     version=0)

    def collect(self, step: int, position: int):
        self.calls.append((step, position, self.producer.weights.version))
        return self.rows(step), {"data/epoch": float(step)}

    def load(self, tensors) -> None:
        self.loaded.append(float(tensors[0][1]))


@pytest.mark.parametrize("k", [1, 2])
def test_producer_stays_within_k_and_trains_each_episode_once(k):
    run, steps = _Run(k, 6), 6
    seen: list[object] = []
    try:
        for step in range(1, steps + 1):
            trajs, metrics = run.producer.take(step, learner_version=step - 1)
            seen += [t.group_id for t in trajs]
            assert 0 <= metrics["async/staleness_max"] <= k
            assert metrics["async/dropped_stale"] == 0.0
            assert 0.0 <= metrics["async/engine_idle_frac"] <= 1.0
            run.producer.publish(step, [("w", torch.tensor(float(step)))])
    finally:
        run.producer.close()
    assert [c[0] for c in run.calls] == list(range(1, steps + 1))
    assert [c[1] for c in run.calls] == [10 + 2 * (s - 1) for s in range(1, steps + 1)]
    assert all(version >= step - 1 - k for step, _, version in run.calls)  # the gate
    assert len(seen) == len(set(seen)) == steps * ROWS  # nothing trained twice, nothing lost
    assert run.producer.accounted and run.producer.trained == steps * ROWS
    assert run.loaded == sorted(run.loaded)  # newest weights only, never back


def test_stale_rows_are_dropped_and_counted():
    # each step's last row claims a token from version 0: at learner version >= 2 it is too old
    run = _Run(1, 3, rows=lambda s: [_traj(tag=(s, 0)), _traj(3, [0, 0, 0], tag=(s, 1))])
    try:
        drops = []
        for step in range(1, 4):
            trajs, metrics = run.producer.take(step, learner_version=step - 1)
            drops.append(metrics["async/dropped_stale"])
            run.producer.publish(step, [("w", torch.tensor(float(step)))])
    finally:
        run.producer.close()
    assert drops == [0.0, 0.0, 1.0]  # cumulative
    assert run.producer.accounted and run.producer.trained == 5


def test_all_stale_is_an_error_not_a_silent_step():
    run = _Run(1, 1)
    try:
        with pytest.raises(AsyncRolloutError, match="more than rollout.max_staleness"):
            run.producer.take(1, learner_version=5)
    finally:
        run.producer.close()
    assert run.producer.dropped["stale"] == ROWS and run.producer.accounted


def test_close_counts_what_was_never_trained():
    run = _Run(2, 5)
    run.producer.take(1, learner_version=0)
    deadline = time.monotonic() + 30
    while len(run.calls) < 3 and time.monotonic() < deadline:  # k = 2 at version 0: steps 2
        time.sleep(0.01)                                       # and 3 get played, then it waits
    run.producer.close()
    assert run.producer.started == 3 * ROWS
    assert run.producer.dropped["untrained"] == 2 * ROWS and run.producer.accounted


def test_a_failing_producer_fails_the_step():
    def boom(step):
        raise RuntimeError("engine died")

    run = _Run(1, 2, rows=boom)
    with pytest.raises(AsyncRolloutError, match="engine died"):
        run.producer.take(1, learner_version=0)
    run.producer.close()


def test_fresh_mismatch_guards_only_rows_at_the_learners_version():
    batch = RolloutBatch.from_trajectories([_traj(2, [4, 4]), _traj(2, [3, 3])], 0)
    batch.set("old_logprobs", torch.tensor([[-0.5, -0.7], [-3.0, -3.0]]))
    out = fresh_mismatch(batch, 4, {"rollout/logprob_diff": 1.3, "rollout/kl": 0.4})
    assert out["async/logprob_diff"] == 1.3 and out["async/kl"] == 0.4
    assert out["rollout/logprob_diff"] == pytest.approx(0.1)  # row 0 only: |0|, |0.2|
    stale = fresh_mismatch(batch, 5, {"rollout/logprob_diff": 1.3})
    assert "rollout/logprob_diff" not in stale  # no fresh row: the guard skips this step


def test_fresh_mismatch_without_stage_b():
    """A one-step update measured the gap in its own forward (no old_logprobs on the batch)."""
    batch = RolloutBatch.from_trajectories([_traj(2, [3, 3]), _traj(2, [2, 2])], 0)
    measured = {"rollout/logprob_diff": 0.2, "rollout/kl": 0.01}
    mixed = fresh_mismatch(batch, 3, measured)
    assert "rollout/logprob_diff" not in mixed  # row 1 is stale; no old logprobs to split by row
    fresh = fresh_mismatch(batch.select([0]), 3, measured)
    assert fresh["rollout/logprob_diff"] == 0.2 and fresh["async/logprob_diff"] == 0.2
    stale = fresh_mismatch(batch.select([0]), 4, measured)
    assert "rollout/logprob_diff" not in stale and stale["async/kl"] == 0.01


def test_inflight_updates_need_a_versioned_engine():
    with pytest.raises(AsyncRolloutError, match="rollout.inflight_update='continue' needs an "
                       "engine that records versions .* object does not"):
        AsyncRollout(lambda s, p: ([], {}), lambda t: None, max_staleness=1, first_step=1,
                     last_step=2, first_position=0, prompts_per_step=1, version=0,
                     engine=object(), inflight="continue")
    with pytest.raises(ValueError, match="inflight must be one of off, continue, abort"):
        AsyncRollout(lambda s, p: ([], {}), lambda t: None, max_staleness=1, first_step=1,
                     last_step=2, first_position=0, prompts_per_step=1, version=0,
                     inflight="pause")


def test_version_metrics_count_stale_tokens_and_mixed_rows():
    from rlvr.training.async_rollout import _version_metrics

    rows = [_traj(3, [2, 3, 3]), _traj(3, [3, 3, 3]), _traj(2, [1, 3], mask=[0, 1])]
    metrics = _version_metrics(rows, 3)
    assert metrics == {"async/stale_token_frac": 1 / 7, "async/mixed_version_rows": 1.0}


def test_stale_rows_stay_as_invalid_rows():
    """A dropped row keeps its place (every rank keeps its row count for the step's gathers)
    with response mask 0; its batch row is invalid, so its group's baseline leaves it out."""
    from rlvr.training.async_rollout import DROPPED
    from rlvr.training.rollout_source import StepEpisodes

    extra = _traj(2, [0, 0])
    old = _traj(3, [0, 0, 0], tag="g")
    old.extra_rows = [extra]
    run = _Run(1, 1, rows=lambda s: [_traj(3, [3, 3, 3], tag="g"), old])
    try:
        trajs, metrics = run.producer.take(1, learner_version=3)
    finally:
        run.producer.close()
    assert len(trajs) == 2 and trajs[0] is not old and DROPPED not in trajs[0].metadata
    assert trajs[1].metadata[DROPPED] == "stale" and trajs[1].response_mask == [0, 0, 0]
    assert trajs[1].extra_rows[0].metadata[DROPPED] == "stale"
    assert old.response_mask == [1, 1, 1]  # the producer's row is not changed
    assert metrics["async/dropped_stale"] == 1.0 and metrics["async/staleness_max"] == 0.0
    episodes = StepEpisodes(trajs, metrics, left_out_key=DROPPED)
    batch = episodes.batch(0)
    assert batch.rows_valid().tolist() == [True, False, False]  # the extra row too
    assert episodes.left_out_rows(batch).tolist() == [0, 1, 1]
    assert batch.response_mask[1:].sum() == 0
