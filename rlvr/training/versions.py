"""Policy versions for asynchronous RL: who generated a token, and how stale it is.

The learner's version is the number of policy updates it has made (``TrainerState.step`` after
a step; 0 before the first). Each rollout token records the version of the weights that
generated it (``Trajectory.policy_versions``). When the learner trains a row at version ``V``,
the row's staleness is ``V - min(version of its model tokens)``; a row whose staleness exceeds
``rollout.max_staleness`` is dropped before training (``STALE``) and counted.

``PublishedWeights`` is the hand-off between the learner's thread and the rollout producer's:
the learner publishes a detached copy of its full weights after each update (the producer must
never read tensors the optimizer is writing); the producer waits until a version new enough is
published and loads the newest into its engine, between batches.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import torch

from rlvr.trajectory import Trajectory

STALE = "stale"
"""Drop reason: a token was generated more than ``max_staleness`` versions ago."""
UNTRAINED = "untrained"
"""Drop reason: produced (or in production) when the run ended or failed; never trained."""


def stamp(trajectories: Iterable[Trajectory], version: int) -> None:
    """Record that every response token was generated at ``version`` (where none is recorded).

    Trajectories that already carry versions (an engine that swapped weights mid-episode would
    record them itself) keep theirs.
    """
    for traj in trajectories:
        if traj.policy_versions is None:
            traj.policy_versions = [version] * len(traj.response_ids)


def token_versions(traj: Trajectory) -> list[int] | None:
    """The versions of ``traj``'s model tokens (mask 1), in order; None when it records none."""
    if traj.policy_versions is None:
        return None
    return [v for v, m in zip(traj.policy_versions, traj.response_mask) if m]


def oldest_version(traj: Trajectory, current: int) -> int:
    """The oldest version among ``traj``'s model tokens (``current`` when it records none)."""
    if traj.policy_versions is None:
        return current
    versions = [v for v, m in zip(traj.policy_versions, traj.response_mask) if m]
    return min(versions, default=current)


def staleness(traj: Trajectory, learner_version: int) -> int:
    """``learner_version`` minus the oldest version of ``traj``'s model tokens (>= 0 if sane)."""
    return learner_version - oldest_version(traj, learner_version)


def split_stale(trajectories: Sequence[Trajectory], learner_version: int,
                max_staleness: int) -> tuple[list[Trajectory], list[Trajectory], list[int]]:
    """``(kept, dropped, staleness of the kept rows)``: rows over ``max_staleness`` are dropped.

    A row is dropped when ANY of its model tokens is older than ``max_staleness`` versions.
    """
    kept: list[Trajectory] = []
    dropped: list[Trajectory] = []
    ages: list[int] = []
    for traj in trajectories:
        age = staleness(traj, learner_version)
        if age > max_staleness:
            dropped.append(traj)
        else:
            kept.append(traj)
            ages.append(age)
    return kept, dropped, ages


class PublishedWeights:
    """The newest weights the learner published, by version; thread-safe.

    Args:
        version: the version of the weights the engine starts with.
    """

    def __init__(self, version: int) -> None:
        self.version = version
        self._tensors: list[tuple[str, torch.Tensor]] | None = None
        self._cond = threading.Condition()
        self._closed = False

    def publish(self, version: int, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Publish ``version``'s weights (copied: the caller may keep training its own)."""
        copied = [(name, t.detach().to("cpu", copy=True)) for name, t in named_tensors]
        with self._cond:
            self.version, self._tensors = version, copied
            self._cond.notify_all()

    def wait_for(self, version: int, timeout: float | None = None) -> bool:
        """Block until ``version`` (or newer) is published or ``close``; whether it was."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self.version >= version, timeout)
            return self.version >= version

    def take(self, newer_than: int) -> tuple[int, list[tuple[str, torch.Tensor]] | None]:
        """``(version, tensors)`` of the newest weights; tensors None when not ``newer_than``."""
        with self._cond:
            if self.version <= newer_than or self._tensors is None:
                return self.version, None
            return self.version, self._tensors

    def close(self) -> None:
        """Wake every waiter (the run is ending)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
