"""Which task each group of a step plays: epochs without replacement over the env's tasks.

Tasks are drawn the way supervised data loaders draw examples: epoch ``e`` is a permutation of
the env's ``num_tasks`` task indices, shuffled with a seed derived from ``(trainer.seed, "epoch",
e)``, and positions ``e * num_tasks ... (e + 1) * num_tasks - 1`` of the run's task stream walk
it in order. Every task is played once per epoch (by ``group_size`` episodes), no task twice
before every task has had its turn. The position is a counter in the trainer's checkpoint
(``TrainerState.tasks_drawn``), so a resumed run continues the same order.

Group ``j`` of a step that starts at position ``p`` plays the task at position ``p + j``,
whichever rank plays it, so one rank and many ranks play the same tasks.

Simplifications: dynamic-sampling refills (``rollout.dynamic_sampling``) draw their tasks
uniformly from the env's seeded ``reset`` (with replacement) and do not move the position, as do
envs without a ``num_tasks`` attribute (the env then picks its task from the reset seed).
"""

from __future__ import annotations

import torch

from rlvr.errors import ConfigError
from rlvr.seeds import derived_seed


class TaskOrder:
    """Task indices by position in the run's task stream (epochs of seeded permutations).

    Args:
        num_tasks: how many tasks the training env holds (``>= 1``).
        seed: the run's seed.
    """

    def __init__(self, num_tasks: int, seed: int) -> None:
        if num_tasks < 1:
            raise ConfigError(f"the training env must hold at least one task; got {num_tasks}")
        self.num_tasks = num_tasks
        self.seed = seed
        self._epoch = -1
        self._perm: list[int] = []

    def permutation(self, epoch: int) -> list[int]:
        """The task indices of ``epoch`` in the order they are played."""
        if epoch != self._epoch:
            gen = torch.Generator().manual_seed(derived_seed(self.seed, "epoch", epoch))
            self._perm = torch.randperm(self.num_tasks, generator=gen).tolist()
            self._epoch = epoch
        return self._perm

    def task_index(self, position: int) -> int:
        """The task played at ``position`` (``>= 0``) of the stream."""
        epoch, offset = divmod(position, self.num_tasks)
        return self.permutation(epoch)[offset]

    def epoch(self, position: int) -> float:
        """Epochs completed at ``position`` (fractional), e.g. for the ``data/epoch`` metric."""
        return position / self.num_tasks


__all__ = ["TaskOrder"]
