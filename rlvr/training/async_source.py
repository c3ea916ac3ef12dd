"""The asynchronous rollout source (``rollout.max_staleness >= 1``): the producer's episodes.

``AsyncSource`` keeps the trainer's side of asynchronous RL in one object behind the rollout
protocol (``rlvr.training.rollout_source``): it builds the producer
(``rlvr.training.async_rollout.AsyncRollout``) and takes each step's episodes from it (rows
dropped as stale stay as rows left out), moves the sync guard's numbers to the rows played by
the learner's current version (``fresh_mismatch``) and reduces the version probe's, publishes
the weights after each update (the probe records the learner's scores first), pauses every
rank's producer for a held-out evaluation (the engine gets the learner's weights, named with
their version), and at the end stops the producer and gives the engine the last weights.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from rlvr.agents.engine import ScoringEngine, SharedEngine
from rlvr.batch import RolloutBatch
from rlvr.training.async_rollout import DROPPED, AsyncRollout, fresh_mismatch
from rlvr.training.rollout_source import RolloutParts, StepEpisodes
from rlvr.training.version_probe import VersionProbe, reduce_probe_metrics


class AsyncSource:
    """Episodes played ahead by a producer thread on the engine's own copy of the weights.

    Args:
        parts: the trainer's pieces; the producer starts at ``parts.first_step`` from
            ``parts.first_position``, with the engine at version ``first_step - 1``.
    """

    own_weights: ClassVar[bool] = True

    def __init__(self, parts: RolloutParts) -> None:
        self.parts = parts
        self.version = parts.first_step - 1
        self.probe = VersionProbe(parts.pad_id, parts.device)  # proves each version loaded
        self.producer: AsyncRollout | None = None
        """Made when training starts (the first ``take``): a producer that cannot run for this
        engine is refused by ``train``, which then closes the engine."""

    def _start(self) -> AsyncRollout:
        """The producer (made on first use), playing from ``parts.first_step``."""
        if self.producer is not None:
            return self.producer
        parts, engine = self.parts, self.parts.engine
        if not isinstance(engine, ScoringEngine):
            parts.log(f"[rlvr] NOTICE: the {parts.engine_name} engine cannot score a probe "
                      "(rlvr.agents.engine.ScoringEngine): the sync guard checks only rows "
                      "played by the learner's current weights")
        self.producer = AsyncRollout(  # late-bound: the stream and engine as they are when used
            lambda step, position: parts.stream.collect(step, position),
            lambda tensors: engine.update_weights(tensors), max_staleness=parts.max_staleness,
            first_step=parts.first_step, last_step=parts.last_step,
            first_position=parts.first_position, prompts_per_step=parts.prompts_per_step,
            version=parts.first_step - 1, engine=engine, inflight=parts.inflight_update,
            probe=self.probe, shared=parts.world_size > 1 and isinstance(engine, SharedEngine))
        return self.producer

    def take(self, step: int, position: int, learner_version: int) -> StepEpisodes:
        """The producer's episodes of ``step``; the probe picks its row from the first."""
        trajectories, metrics = self._start().take(step, learner_version, self.parts.device)
        self.probe.choose(trajectories)
        return StepEpisodes(trajectories, metrics, left_out_key=DROPPED)

    def ahead(self, step: int, position: int) -> None:
        """Nothing: the producer already plays ahead."""

    def guard_metrics(self, batch: RolloutBatch, learner_version: int,
                      metrics: dict[str, float]) -> dict[str, float]:
        """The guard checks rows of the learner's current version, and the probe."""
        metrics = fresh_mismatch(batch, learner_version, metrics)
        return reduce_probe_metrics(metrics, self.parts.device)

    def sync(self, version: int) -> None:
        """Push the learner's weights into the engine, named ``version``."""
        self.parts.push(version)

    def after_update(self, step: int) -> None:
        """Publish the updated weights for the producer (the probe scores them first)."""
        self.probe.record_learner(step, self.parts.score_rows)
        self._start().publish(step, self.parts.learner_tensors())
        self.version = step

    def evaluation(self, step: int) -> contextlib.AbstractContextManager[Any] | None:
        """Every rank pauses its producer and syncs on an evaluation step (rank 0 evaluates)."""
        every = self.parts.eval_every
        if not every or step % every:
            return None
        return self._start().paused(step, lambda: self.sync(step))

    def finish(self) -> None:
        """Stop the producer; the engine gets the final weights for the last evaluation."""
        self._start().close()
        self.sync(self.version)

    def close(self) -> None:
        """Stop the producer (its current step ends on a live engine)."""
        if self.producer is not None:
            self.producer.close()


__all__ = ["AsyncSource"]
