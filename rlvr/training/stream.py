"""Stage A of the RL loop: this rank's groups of episodes for a step.

Each group's task depends only on its position in the run's task stream (epochs without
replacement, ``rlvr.training.tasks``) and its sampling seed only on ``(seed, step, group)``, so
the same config gives the same episodes on one rank or many, and after a resume. Dynamic
sampling (DAPO) refills per rank; when ``max_refill_rounds`` runs out the batch is topped up with
dropped (zero-advantage) groups, so the batch size stays fixed; ``reduce_sampling_metrics``
reports the refills of all ranks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import torch

from rlvr.config.schema import EnvConfig, RolloutConfig
from rlvr.distributed import all_reduce_max, all_reduce_sum, rank_and_world
from rlvr.errors import ConfigError
from rlvr.seeds import derived_seed
from rlvr.training.tasks import TaskOrder
from rlvr.trajectory import Trajectory


class EpisodeStream:
    """Stage A: this rank's groups of episodes for a step, with optional dynamic sampling.

    Group ``j`` of step ``s`` whose step starts at task position ``p`` plays task
    ``order.task_index(p + j)`` (``reset(options={"task_index": ...})``), resets its env with
    seed ``derived_seed(seed, "task", s, j)`` and samples with ``derived_seed(seed, "sample", s,
    j)``, whatever the rank that plays it. Without ``num_tasks`` the env picks the task from
    the reset seed. ``open_ahead(step, position)`` opens a step's first-round episodes early
    (the trainer calls it beside the update); its ``collect`` then plays them, the same episodes.

    Args:
        runner: an ``rlvr.agents.EpisodeRunner`` on this rank's engine.
        env: the ``env`` section (the env trained on).
        rollout: the ``rollout`` section (tasks and episodes per step, dynamic sampling).
        seed: ``trainer.seed``.
        rank: this rank.
        world_size: the number of ranks; must divide ``rollout.prompts_per_step``.
        num_tasks: the training env's task count (``rlvr.training.preflight.RunPlan``), or
            None when it has none.
    """

    def __init__(self, runner: Any, env: EnvConfig, rollout: RolloutConfig, seed: int, *,
                 rank: int, world_size: int, num_tasks: int | None = None) -> None:
        self.runner = runner
        self.env, self.rollout, self.seed = env, rollout, seed
        self.rank = rank
        self.order = TaskOrder(num_tasks, seed) if num_tasks else None
        if rollout.prompts_per_step % world_size:
            raise ConfigError(
                f"rollout.prompts_per_step ({rollout.prompts_per_step}) must be a multiple of "
                f"the number of ranks ({world_size})"
            )
        self.groups_per_rank = rollout.prompts_per_step // world_size
        self._ahead: tuple[int, int, list[Any]] | None = None  # (step, position, openings)

    def _spec(self, key: tuple[object, ...], position: int | None) -> Any:
        from rlvr.agents.runner import EpisodeSpec

        env = self.env
        options = None
        if position is not None and self.order is not None:
            options = {"task_index": self.order.task_index(position)}
        return EpisodeSpec(env_id=env.id, env_kwargs=dict(env.kwargs),
                           seed=derived_seed(self.seed, "task", *key),
                           options=options, group_id="/".join(map(str, key)))

    def _play(self, keys: list[tuple[object, ...]], positions: list[int] | None = None,
              openings: Sequence[Any] | None = None) -> list[list[Trajectory]]:
        """Play one group per key (at its task position, if given), concurrently.

        ``openings``: the groups' ``Opening``s from ``open_ahead`` (same keys and positions).
        """
        size = self.rollout.group_size
        seed = self.seed
        specs = self._specs(keys, positions)
        ahead: list[Any] = list(openings) if openings is not None else [None] * len(keys)

        async def play_all() -> list[list[Trajectory]]:
            return list(await asyncio.gather(*(
                self.runner.arun([spec], group_size=size, seed=derived_seed(seed, "sample", *k),
                                 opened=o)
                for k, spec, o in zip(keys, specs, ahead)
            )))

        return self.runner.run_coroutine(play_all())

    def _specs(self, keys: list[tuple[object, ...]], positions: list[int] | None) -> list[Any]:
        where: list[int | None] = list(positions) if positions is not None else [None] * len(keys)
        return [self._spec(k, p) for k, p in zip(keys, where)]

    def _first_round(self, step: int, position: int) -> tuple[list[tuple[object, ...]], list[int]]:
        """The keys and task positions of this rank's groups of ``step``."""
        n = self.groups_per_rank
        first = self.rank * n
        return [(step, first + j) for j in range(n)], [position + first + j for j in range(n)]

    def open_ahead(self, step: int, position: int) -> None:
        """Open ``step``'s episodes now, in the background (``EpisodeRunner.open_ahead``).

        The next ``collect(step, position)`` plays them; a ``collect`` of another step or
        position hands them back unplayed. Dynamic sampling's refills are opened when needed.
        """
        self.discard_ahead()
        keys, positions = self._first_round(step, position)
        size = self.rollout.group_size
        openings = self.runner.open_ahead([([spec], size) for spec in self._specs(keys, positions)])
        self._ahead = (step, position, openings)

    def discard_ahead(self) -> None:
        """Hand back episodes opened ahead and not played."""
        if self._ahead is not None:
            self.runner.discard(self._ahead[2])
            self._ahead = None

    def collect(self, step: int, position: int = 0) -> tuple[list[Trajectory], dict[str, float]]:
        """Play this rank's groups of ``step``.

        Args:
            step: the training step (seeds the episodes).
            position: the task stream position where this step starts (over all ranks); the
                step plays positions ``position ... position + prompts_per_step - 1``.

        Returns:
            ``(trajectories, metrics)``: ``groups_per_rank * group_size`` trajectories, group
            by group; metrics ``data/epoch`` (epochs of the task stream completed after this
            step, when the env has ``num_tasks``), ``rollout/refill_rounds`` and
            ``rollout/kept_group_frac`` with dynamic sampling (this rank's; see
            ``reduce_sampling_metrics``).
        """
        n = self.groups_per_rank
        keys, positions = self._first_round(step, position)
        openings = None
        if self._ahead is not None and self._ahead[:2] == (step, position):
            openings, self._ahead = self._ahead[2], None
        self.discard_ahead()
        groups = self._play(keys, positions, openings)
        progress: dict[str, float] = {}
        if self.order is not None:
            end = position + self.rollout.prompts_per_step
            progress["data/epoch"] = self.order.epoch(end)
        if not self.rollout.dynamic_sampling:
            return [t for g in groups for t in g], progress
        kept = [g for g in groups if _has_signal(g)]
        dropped = [g for g in groups if not _has_signal(g)]
        first_kept = len(kept)
        rounds = 0
        while len(kept) < n and rounds < self.rollout.max_refill_rounds:
            rounds += 1
            more = self._play([(step, f"r{rounds}", self.rank, j) for j in range(n - len(kept))])
            kept += [g for g in more if _has_signal(g)]
            dropped += [g for g in more if not _has_signal(g)]
        chosen = kept[:n] + dropped[: max(0, n - len(kept))]
        metrics = {REFILL_ROUNDS: float(rounds), KEPT_GROUP_FRAC: first_kept / n, **progress}
        return [t for g in chosen for t in g], metrics


def _has_signal(group: Sequence[Trajectory]) -> bool:
    """Whether the rewards of a group differ (DAPO keeps only such groups)."""
    rewards = [t.reward for t in group]
    return max(rewards) - min(rewards) > 1e-9



REFILL_ROUNDS = "rollout/refill_rounds"
KEPT_GROUP_FRAC = "rollout/kept_group_frac"


def reduce_sampling_metrics(metrics: dict[str, float], device: torch.device) -> dict[str, float]:
    """Dynamic sampling's metrics over all ranks (collective; every rank calls it).

    ``rollout/refill_rounds``: the most rounds a rank played (the step waited for it);
    ``rollout/kept_group_frac``: the mean over ranks (each plays the same number of groups).
    Metrics without them (no dynamic sampling, the same on every rank) pass unchanged.
    """
    world = rank_and_world()[1]
    if world == 1 or REFILL_ROUNDS not in metrics:
        return metrics
    rounds = all_reduce_max(torch.tensor([metrics[REFILL_ROUNDS]], dtype=torch.float64,
                                         device=device)).item()
    kept = all_reduce_sum(torch.tensor([metrics[KEPT_GROUP_FRAC]], dtype=torch.float64,
                                       device=device)).item()
    return metrics | {REFILL_ROUNDS: rounds, KEPT_GROUP_FRAC: kept / world}
