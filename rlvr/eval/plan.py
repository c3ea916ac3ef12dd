"""The evaluation plan: which (suite entry, task, sample) episodes to play, with which seeds.

Each episode's seed is derived from ``(seed, entry key, task index, sample)`` alone, so the same
root seed always plays the same episodes, whatever the batching, and every checkpoint is
evaluated on exactly the same tasks and seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.seeds import derived_seed

__all__ = ["PlannedEpisode", "SuiteEntry", "default_temperature", "episode_seed", "plan_episodes"]


def default_temperature(samples: int) -> float:
    """The sampling temperature of an evaluation that sets none.

    Greedy (0) for one sample per task, else 1.0 (pass@k over greedy samples would equal pass@1).

    ``rlvr eval`` (``SuiteEvalConfig.temperature: null``) and the trainer's held-out evaluation
    both use it.
    """
    return 0.0 if samples == 1 else 1.0


@dataclass(frozen=True)
class SuiteEntry:
    """One env of a suite, as evaluation uses it.

    Attributes:
        key: the name the report uses (the entry's name, else its env id; made unique).
        env_id: the gymnasium id.
        kwargs: keyword arguments for ``gymnasium.make`` (the split included).
        n: tasks to evaluate (task indices 0..n-1).
    """

    key: str
    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    n: int = 1


@dataclass(frozen=True)
class PlannedEpisode:
    """One episode to play: which env, which task, which sample, which seed."""

    entry: SuiteEntry
    task_index: int
    sample: int
    seed: int


def episode_seed(seed: int, key: str, task_index: int, sample: int) -> int:
    """A stable 31-bit seed for one episode (independent of Python's hash randomisation)."""
    return derived_seed(seed, key, task_index, sample, bits=31)


def plan_episodes(entries: Sequence[SuiteEntry], samples: int, seed: int) -> list[PlannedEpisode]:
    """Every (entry, task, sample) to play, entry-major, with its derived seed."""
    return [
        PlannedEpisode(entry, task, sample, episode_seed(seed, entry.key, task, sample))
        for entry in entries
        for task in range(entry.n)
        for sample in range(samples)
    ]
