"""Tasks are drawn in epochs without replacement, seeded, and a resume continues the order."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr import envs
from rlvr.algorithms.kl import FixedKLController
from rlvr.config import load_config
from rlvr.errors import ConfigError
from rlvr.learner import Checkpointer
from rlvr.trainer import Trainer, train
from rlvr.training.state import TrainerState
from rlvr.training.tasks import TaskOrder

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
from trainer_helpers import QUIET, SMALL_MODEL  # noqa: E402 (shared trainer-test overrides)

N_TASKS = 6
SOURCE = f"{{n_tasks: {N_TASKS}, n_operands: 2, min_digits: 1, max_digits: 2, operators: '+'}}"


@pytest.mark.parametrize("n", [1, 5, 13])
def test_every_task_once_per_epoch(n):
    order = TaskOrder(n, seed=3)
    for epoch in range(4):
        drawn = [order.task_index(p) for p in range(epoch * n, (epoch + 1) * n)]
        assert sorted(drawn) == list(range(n))


def test_order_is_seeded_and_reshuffled_each_epoch():
    a, b, c = TaskOrder(50, seed=0), TaskOrder(50, seed=0), TaskOrder(50, seed=1)
    assert [a.task_index(p) for p in range(200)] == [b.task_index(p) for p in range(200)]
    assert a.permutation(0) != c.permutation(0)
    assert a.permutation(0) != a.permutation(1)
    assert a.epoch(75) == 1.5
    with pytest.raises(ConfigError, match="at least one task"):
        TaskOrder(0, seed=0)


def test_position_survives_a_checkpoint(tmp_path):
    state = TrainerState(FixedKLController(0.0))
    state.tasks_drawn = 17
    Checkpointer({"trainer": state}).save(tmp_path / "step_1")
    restored = TrainerState(FixedKLController(0.0))
    Checkpointer({"trainer": restored}).load(tmp_path / "step_1")
    assert restored.tasks_drawn == 17


def _played(trajs):
    """Task ids of the groups, in group order (group_size episodes each)."""
    ids = []
    for t in trajs:
        if not ids or ids[-1][0] != t.group_id:
            ids.append((t.group_id, t.task_id))
    return [task for _, task in ids]


def test_trainer_plays_each_task_once_per_epoch_and_resumes_the_order(tmp_path):
    overrides = SMALL_MODEL + QUIET + [
        "sft.enabled=false", f"trainer.output_dir={tmp_path}", "rollout.prompts_per_step=2",
        "rollout.group_size=2", "eval.tasks=2", f"env.kwargs.source_kwargs={SOURCE}",
        "trainer.checkpoint_every=2",
    ]
    env = envs.make("rlvr/Math-v0", **load_config(CONFIGS / "quickstart.yaml",
                                                   overrides).env.kwargs)
    ids = [str(env.unwrapped.source[i]["task_id"]) for i in range(N_TASKS)]
    env.close()
    order = TaskOrder(N_TASKS, seed=0)
    expected = [ids[order.task_index(p)] for p in range(4 * N_TASKS)]

    result = train(load_config(CONFIGS / "quickstart.yaml", overrides + ["trainer.steps=3"]),
                   log=lambda *_: None)
    assert [m["data/epoch"] for m in result.history] == [2 / 6, 4 / 6, 1.0]

    resumed = Trainer(load_config(CONFIGS / "quickstart.yaml",
                                  overrides + ["trainer.steps=6", "trainer.resume=true"]),
                      log=lambda *_: None)
    try:
        assert resumed.state.step == 2 and resumed.state.tasks_drawn == 4
        played = []
        position = resumed.state.tasks_drawn
        for step in range(3, 3 + N_TASKS):  # three more epochs' worth of steps
            with resumed.engine_weights():
                trajs, _ = resumed.stream.collect(step, position)
            played += _played(trajs)
            position += 2
        assert played == expected[4:4 + 2 * N_TASKS]
        for epoch in (1, 2):  # whole epochs after the resume point: every task once
            assert sorted(expected[epoch * N_TASKS:(epoch + 1) * N_TASKS]) == sorted(ids)
    finally:
        resumed.close()
