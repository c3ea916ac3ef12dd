"""Asynchronous RL (rollout.max_staleness=1) on two gloo ranks: one torchrun launch of
``learner/async_two_rank_worker.py`` (three short runs in one process group, ~25 s on 2 cores)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from rlvr.metrics import read_jsonl

WORKER = Path(__file__).parent / "learner" / "async_two_rank_worker.py"
REPO = Path(__file__).resolve().parents[2]
ROWS = 2 * 2  # per rank and step: prompts_per_step 4 over 2 ranks, group_size 2


@pytest.fixture(scope="module")
def runs(tmp_path_factory, run_process_group):
    out = tmp_path_factory.mktemp("async_two_ranks")
    run_process_group(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(WORKER), str(out)],
        cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=240,  # a hang fails
        check=True)

    def read(job: str) -> list[dict]:
        return [json.loads((out / job / f"rank{r}.json").read_text()) for r in (0, 1)]

    return out, read


def _same(a: dict, b: dict) -> None:
    """Both ranks logged the same step metrics (rank 0 alone adds its evaluation)."""
    keys = [k for k in a if not k.startswith(("eval/", "time/", "perf/"))]
    assert sorted(keys) == sorted(k for k in b if not k.startswith(("eval/", "time/", "perf/")))
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}


def test_the_sync_guards_numbers_are_the_same_on_every_rank(runs):
    """Rank 0's rows are all at the learner's version, rank 1's are not: both ranks drop the
    step-B gap (it includes rank 1's stale row) and recompute it over the fresh rows of both
    ranks (|0|, |0.2| on rank 0; |0.4|, |0| on rank 1), so the guard raises on all or none."""
    _, read = runs
    zero, one = read("fresh")
    assert zero == one
    assert zero["async/logprob_diff"] == 1.3 and zero["async/kl"] == 0.4
    assert zero["rollout/logprob_diff"] == pytest.approx(0.15)


def test_two_ranks_train_every_episode_once_within_k(runs):
    out, read = runs
    ranks = read("run")
    for r, rec in enumerate(ranks):
        assert rec["played"] == [[1, 0], [2, 4]]  # each rank played each step once, in order
        assert rec["accounted"] and rec["started"] == 2 * ROWS
        # the row rank 1 handed in with a far too old version is dropped there, counted
        assert rec["dropped"] == {"stale": r, "untrained": 0}
        assert rec["trained"] == 2 * ROWS - r
        assert rec["on_main"] > 0 and rec["off_main"] == []  # the producer made no collective
    h0, h1 = ranks[0]["history"], ranks[1]["history"]
    assert len(h0) == len(h1) == 2
    for a, b in zip(h0, h1):
        _same(a, b)
        assert a["async/staleness_max"] <= 1.0
        assert a["rollout/error_episodes"] == 0.0  # a stale row is not an env error
    last = h0[-1]  # reduced over both ranks: every started episode trained or dropped
    assert last["async/episodes_started"] == 4 * ROWS
    assert last["async/dropped_stale"] == 1.0 and last["async/dropped_untrained"] == 0.0
    assert h0[0]["rollout/logprob_diff"] < 1e-3  # the sync guard checked step 1 on both ranks
    assert "eval/accuracy" in h0[1] and "eval/accuracy" not in h1[1]  # rank 0 evaluated step 2
    assert (out / "run" / "checkpoints" / "step_000002" / "COMPLETE").is_file()


def test_two_ranks_resume_from_the_checkpoint_without_training_anything_twice(runs):
    out, read = runs
    ranks = read("resume")
    for rec in ranks:
        assert rec["resumed_step"] and rec["played"] == [[3, 8]]
        assert rec["accounted"] and rec["trained"] == ROWS and rec["off_main"] == []
        assert rec["history"][0]["async/staleness_max"] == 0.0  # from the checkpoint's weights
    _same(ranks[0]["history"][0], ranks[1]["history"][0])
    steps = [r["step"] for r in read_jsonl(out / "run" / "metrics.jsonl") if "reward/mean" in r]
    assert steps == [1, 2, 3]


def test_a_producer_failing_on_one_rank_stops_every_rank(runs):
    _, read = runs
    failed, other = read("fail")[1], read("fail")[0]
    assert failed["raised"] == ("AsyncRolloutError: step 2: the rollout producer failed: "
                                "RuntimeError('engine died on rank 1')")
    assert other["raised"] == ("AsyncRolloutError: step 2: the rollout producer of another "
                               "rank failed (rank 1: RuntimeError('engine died on rank 1')); "
                               "every rank stops")
    for rec in (failed, other):
        assert rec["closed"] and rec["accounted"]
    # rank 0 had played step 2 (and 3, ahead): taken or produced, never trained
    assert other["trained"] == ROWS and other["dropped"]["untrained"] == other["started"] - ROWS
