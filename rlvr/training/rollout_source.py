"""Where the trainer's episodes come from: one protocol, chosen once per run.

The loop (``rlvr.trainer.Trainer``) asks its rollout source for a step's episodes (stage A),
lets it open the next step's beside stages B and C, hands it the sync guard's numbers, tells it
after the update (sync the engine, or publish a version), brackets held-out evaluations with it,
and closes it. It never asks which source it has: the trainer picks the class once, from
``rollout.max_staleness``:

- ``SyncRollout`` (``max_staleness: 0``): plays each step on the learner's current weights (with
  one rank and the transformers engine, the actor's own module), then pushes the updated
  weights into the engine.
- ``rlvr.training.async_source.AsyncSource`` (``max_staleness >= 1``): a producer thread plays
  steps ahead on the engine's own copy of the weights (``rlvr.training.async_rollout``); the
  update publishes the new weights for it.

A source is built from ``RolloutParts``, the trainer's pieces it may use (the stream, the
engine, the learner's weights as callables), never from the trainer itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from rlvr.batch import RolloutBatch
from rlvr.trajectory import Trajectory

EngineWeights = Callable[[], contextlib.AbstractContextManager[Any]]
"""Keeps the learner's weights ready while the engine generates with them (``Trainer``)."""
PushWeights = Callable[[int | None], None]
"""``push(version)``: the learner's weights into the engine (collective; ``Trainer.sync_weights``),
naming ``version`` on an engine that records versions when it is not None."""


@dataclass
class StepEpisodes:
    """One step's episodes on this rank, as a rollout source hands them to the learner.

    Attributes:
        trajectories: this rank's episodes, group by group (rows left out included: every rank
            keeps its row count for the step's gathers).
        metrics: the step's rollout metrics (over all ranks where the source reduced them).
        left_out_key: the ``Trajectory.metadata`` key that marks a row (an extra row too) the
            source left out on purpose (asynchronous: too stale); such a row has response mask
            0 and is not an error episode. None: the source leaves no row out.
    """

    trajectories: list[Trajectory]
    metrics: dict[str, float]
    left_out_key: str | None = None

    def played(self) -> list[Trajectory]:
        """The episodes that were played and kept (the rollout metrics' rows)."""
        key = self.left_out_key
        return self.trajectories if key is None else \
            [t for t in self.trajectories if key not in t.metadata]

    def batch(self, pad_id: int) -> RolloutBatch:
        """The rows as a ``RolloutBatch``; rows left out are not valid.

        Out of every statistic, as env-error rows (their response mask is already 0).
        """
        batch = RolloutBatch.from_trajectories(self.trajectories, pad_id)
        key = self.left_out_key
        rows = [] if key is None else [i for i, meta in enumerate(batch.metadata)
                                       if meta.get(key)]
        if rows:
            batch.rows_valid()[rows] = False
        return batch

    def left_out_rows(self, batch: RolloutBatch) -> torch.Tensor:
        """``(B,)`` long on ``batch``'s device: 1 on the rows of ``batch`` left out, else 0."""
        key = self.left_out_key
        return torch.tensor([int(key is not None and bool(meta.get(key)))
                             for meta in batch.metadata],
                            dtype=torch.long, device=batch.response_mask.device)


@dataclass
class RolloutParts:
    """What a rollout source is built from (the trainer's pieces, typed).

    Attributes:
        stream: the episode stream (``rlvr.training.stream.EpisodeStream``).
        engine: the rollout engine.
        push: puts the learner's weights into the engine (``PushWeights``).
        engine_weights: the bracket while the engine generates on the learner's weights.
        release_memory: lets the engine free accelerator memory for training (collective).
        learner_tensors: the learner's named tensors to sync (full weights or the adapter).
        score_rows: the learner's logprobs of a batch (the version probe's forward).
        pad_id: the tokenizer's padding id (the version probe's rows).
        device: the learner's device (where reductions run).
        world_size: the number of ranks.
        max_staleness: ``rollout.max_staleness``.
        inflight_update: ``rollout.inflight_update``.
        open_ahead: ``rollout.open_ahead``.
        prompts_per_step: ``rollout.prompts_per_step``.
        engine_name: ``rollout.engine`` (named in notices).
        first_step: the first step to play (the one after the resumed step).
        last_step: ``trainer.steps``.
        first_position: the task stream position where ``first_step`` starts.
        evaluating: this rank runs held-out evaluations (rank 0 with an evaluator).
        eval_every: ``eval.every`` (0 = only before and after RL).
        log: where notices go.
    """

    stream: Any
    engine: Any
    push: PushWeights
    engine_weights: EngineWeights
    release_memory: Callable[[], None]
    learner_tensors: Callable[[], Iterable[tuple[str, torch.Tensor]]]
    score_rows: Callable[..., Any]
    pad_id: int
    device: torch.device
    world_size: int
    max_staleness: int
    inflight_update: str
    open_ahead: bool
    prompts_per_step: int
    engine_name: str
    first_step: int
    last_step: int
    first_position: int
    evaluating: bool
    eval_every: int
    log: Callable[[str], Any] = print


class RolloutSource(Protocol):
    """Where a run's episodes come from (see the module docstring).

    ``own_weights``: the engine needs its own copy of the weights (it generates beside the
    update), never the actor's module.
    """

    own_weights: ClassVar[bool]

    def take(self, step: int, position: int, learner_version: int) -> StepEpisodes:
        """Stage A: this rank's episodes of ``step`` (collective)."""
        ...

    def ahead(self, step: int, position: int) -> None:
        """Start what goes on beside stages B and C, once ``step``'s episodes were checked.

        ``position``: where ``step + 1`` starts in the task stream.
        """
        ...

    def guard_metrics(self, batch: RolloutBatch, learner_version: int,
                      metrics: dict[str, float]) -> dict[str, float]:
        """The step's metrics as the sync guard must read them (collective)."""
        ...

    def sync(self, version: int) -> None:
        """Give the engine the learner's weights now, as ``version`` (collective)."""
        ...

    def after_update(self, step: int) -> None:
        """After ``step``'s update: the engine gets the new weights, or they are published."""
        ...

    def evaluation(self, step: int) -> contextlib.AbstractContextManager[Any] | None:
        """The bracket of ``step``'s held-out evaluation, None when no rank brackets one."""
        ...

    def finish(self) -> None:
        """After the last step: the engine holds the learner's last weights (collective)."""
        ...

    def close(self) -> None:
        """Stop what the source runs (idempotent; before the engine closes)."""
        ...


class SyncRollout:
    """Each step played on the learner's current weights; the update then syncs the engine.

    With ``rollout.open_ahead`` the next step's episodes are opened beside stages B and C.
    """

    own_weights: ClassVar[bool] = False

    def __init__(self, parts: RolloutParts) -> None:
        self.parts = parts

    def take(self, step: int, position: int, learner_version: int) -> StepEpisodes:
        """Play ``step`` now; the engine's memory is then released for training."""
        from rlvr.training.gc_control import collections_paused

        with self.parts.engine_weights(), collections_paused():
            trajectories, metrics = self.parts.stream.collect(step, position)
            self.parts.release_memory()
        return StepEpisodes(trajectories, metrics)

    def ahead(self, step: int, position: int) -> None:
        """Open ``step + 1``'s episodes in the background (``rollout.open_ahead``)."""
        if self.parts.open_ahead and step < self.parts.last_step:
            self.parts.stream.open_ahead(step + 1, position)

    def guard_metrics(self, batch: RolloutBatch, learner_version: int,
                      metrics: dict[str, float]) -> dict[str, float]:
        """As measured: every row was played by the learner's current weights."""
        return metrics

    def sync(self, version: int) -> None:
        """Push the learner's weights into the engine."""
        self.parts.push(None)

    def after_update(self, step: int) -> None:
        """Push the updated weights into the engine."""
        self.parts.push(None)

    def evaluation(self, step: int) -> contextlib.AbstractContextManager[Any] | None:
        """The engine's weights bracket on the evaluating rank (it decides if ``step`` is due)."""
        return self.parts.engine_weights() if self.parts.evaluating else None

    def finish(self) -> None:
        """Nothing: the engine got every update."""

    def close(self) -> None:
        """Nothing runs beside the loop (the runner closes open-ahead episodes)."""


__all__ = ["EngineWeights", "PushWeights", "RolloutParts", "RolloutSource", "StepEpisodes",
           "SyncRollout"]
