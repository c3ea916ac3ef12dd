"""Stage A of the RL loop: this rank's groups of episodes for a step, and cross-rank gathers.

Each group's task and sampling seed depend only on ``(seed, step, group)``, so the same config
gives the same episodes on one rank or many, and after a resume. Dynamic sampling (DAPO) refills
per rank; when ``max_refill_rounds`` runs out the batch is topped up with dropped
(zero-advantage) groups, so the batch size stays fixed.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from rlvr.config import TrainConfig
from rlvr.data import Trajectory
from rlvr.errors import ConfigError


def derived_seed(*parts: object) -> int:
    """A 62-bit seed from ``parts`` (stable across processes and Python versions)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2



def _world() -> tuple[int, int]:
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_rows(t: torch.Tensor) -> torch.Tensor:
    """All ranks' ``(B, R_rank)`` tensors stacked row-wise, right-padded with 0 to the widest R."""
    rank, ws = _world()
    if ws == 1:
        return t
    widths = [torch.zeros(1, dtype=torch.long, device=t.device) for _ in range(ws)]
    dist.all_gather(widths, torch.tensor([t.shape[1]], device=t.device))
    width = int(max(w.item() for w in widths))
    padded = torch.nn.functional.pad(t, (0, width - t.shape[1]))
    parts = [torch.empty_like(padded) for _ in range(ws)]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat(parts, dim=0)


def gather_objects(items: list[Any]) -> list[Any]:
    """All ranks' lists concatenated in rank order."""
    if _world()[1] == 1:
        return items
    out: list[Any] = [None] * _world()[1]
    dist.all_gather_object(out, items)
    return [x for part in out for x in part]



class EpisodeStream:
    """Stage A: this rank's groups of episodes for a step, with optional dynamic sampling.

    Group ``j`` of step ``s`` resets its env with seed ``derived_seed(seed, "task", s, j)`` and
    samples with ``derived_seed(seed, "sample", s, j)``, whatever the rank that plays it.

    Args:
        runner: an ``agents.EpisodeRunner`` on this rank's engine.
        config: the run's config (env, rollout and seed are used).
        rank: this rank.
        world_size: the number of ranks; must divide ``rollout.prompts_per_step``.
    """

    def __init__(self, runner: Any, config: TrainConfig, rank: int, world_size: int) -> None:
        self.runner = runner
        self.config = config
        self.rank = rank
        rollout = config.rollout
        if rollout.prompts_per_step % world_size:
            raise ConfigError(
                f"rollout.prompts_per_step ({rollout.prompts_per_step}) must be a multiple of "
                f"the number of ranks ({world_size})"
            )
        self.groups_per_rank = rollout.prompts_per_step // world_size

    def _spec(self, key: tuple[object, ...]) -> Any:
        from agents.runner import EpisodeSpec

        env = self.config.env
        return EpisodeSpec(env_id=env.id, env_kwargs=dict(env.kwargs),
                           seed=derived_seed(self.config.trainer.seed, "task", *key),
                           group_id="/".join(map(str, key)))

    def _play(self, keys: list[tuple[object, ...]]) -> list[list[Trajectory]]:
        """Play one group per key, all concurrently on the engine."""
        size = self.config.rollout.group_size
        seed = self.config.trainer.seed

        async def play_all() -> list[list[Trajectory]]:
            return list(await asyncio.gather(*(
                self.runner.arun([self._spec(k)], group_size=size,
                                 seed=derived_seed(seed, "sample", *k))
                for k in keys
            )))

        return asyncio.run(play_all())

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """Play this rank's groups of ``step``.

        Returns:
            ``(trajectories, metrics)``: ``groups_per_rank * group_size`` trajectories, group
            by group; metrics ``rollout/refill_rounds`` and ``rollout/kept_group_frac`` with
            dynamic sampling.
        """
        n = self.groups_per_rank
        groups = self._play([(step, self.rank * n + j) for j in range(n)])
        if not self.config.rollout.dynamic_sampling:
            return [t for g in groups for t in g], {}
        kept = [g for g in groups if _has_signal(g)]
        dropped = [g for g in groups if not _has_signal(g)]
        first_kept = len(kept)
        rounds = 0
        while len(kept) < n and rounds < self.config.rollout.max_refill_rounds:
            rounds += 1
            more = self._play([(step, f"r{rounds}", self.rank, j) for j in range(n - len(kept))])
            kept += [g for g in more if _has_signal(g)]
            dropped += [g for g in more if not _has_signal(g)]
        chosen = kept[:n] + dropped[: max(0, n - len(kept))]
        metrics = {"rollout/refill_rounds": float(rounds),
                   "rollout/kept_group_frac": first_kept / n}
        return [t for g in chosen for t in g], metrics


def _has_signal(group: Sequence[Trajectory]) -> bool:
    """Whether the rewards of a group differ (DAPO keeps only such groups)."""
    rewards = [t.reward for t in group]
    return max(rewards) - min(rewards) > 1e-9

