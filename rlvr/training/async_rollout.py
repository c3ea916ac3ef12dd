"""Asynchronous RL with a bounded staleness: a producer thread plays episodes ahead of the update.

With ``rollout.max_staleness: k >= 1`` the trainer does not play a step's episodes itself: a
producer thread plays step ``s`` as soon as the learner has published version ``s - 1 - k`` (the
weights after update ``s - 1 - k``), so while the learner trains step ``s`` the engine already
plays steps ``s + 1 ... s + k`` (``k = 1``: exactly one step ahead). The engine runs on its own
copy of the weights (``agents.engines``; a world-size-1 transformers engine otherwise shares the
actor's module), on its own threads, and loads the newest published weights between batches,
never while one is in flight. Every token is stamped with the version that generated it
(``rlvr.training.versions``).

Accounting: every episode the producer starts is either handed to the learner and trained, or
counted as dropped with its reason: ``stale`` (a model token older than ``k`` versions when the
learner takes it; the gate above makes this a guard that should read 0) and ``untrained``
(produced, or in production, when the run ended or failed). A taken step is never handed out
again, so nothing is trained twice. At a checkpoint nothing in flight is saved: a resumed run
replays the steps after the checkpoint from their deterministic seeds, with the resumed weights,
and the episodes the killed run had in flight were never trained.

Per step (``take``): ``async/staleness_mean`` and ``async/staleness_max`` over the trained rows,
``async/dropped_<reason>`` (totals so far), ``async/episodes_started`` (total so far),
``async/engine_idle_frac`` (the producer's time waiting for the gate or the engine, over the time
since the last step) and ``async/learner_idle_frac`` (the learner's time waiting for episodes,
over the same time).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.algorithms.aggregate import aggregate
from rlvr.algorithms.kl import kl_penalty
from rlvr.batch import RolloutBatch
from rlvr.errors import RlvrError
from rlvr.training.versions import STALE, UNTRAINED, PublishedWeights, split_stale, stamp
from rlvr.trajectory import Trajectory

Collect = Callable[[int, int], tuple[list[Trajectory], dict[str, float]]]
"""``collect(step, task_position) -> (trajectories, metrics)`` (``EpisodeStream.collect``)."""
LoadWeights = Callable[[list[tuple[str, torch.Tensor]]], None]
"""Loads full named tensors into the engine (``Engine.update_weights``)."""


class AsyncRolloutError(RlvrError):
    """The producer failed, or a step came out with nothing trainable."""


@dataclass
class ProducedStep:
    """One step's episodes as the producer handed them over.

    Attributes:
        step: the training step they are for.
        trajectories: this rank's episodes, stamped with ``version``.
        metrics: the stream's metrics for the step.
        version: the policy version the engine held while playing them.
    """

    step: int
    trajectories: list[Trajectory]
    metrics: dict[str, float] = field(default_factory=dict)
    version: int = 0


class AsyncRollout:
    """The producer thread and its bookkeeping (one rank).

    Args:
        collect: plays a step (``EpisodeStream.collect``); called on the producer thread only.
        load_weights: loads published weights into the engine (producer thread or ``paused``).
        max_staleness: ``k >= 1``.
        first_step: the first step to produce (the step after the resumed one).
        last_step: the last step of the run.
        first_position: the task stream position where ``first_step`` starts.
        prompts_per_step: tasks per step over all ranks (the position's stride).
        version: the version of the weights the engine holds now (the learner's).
    """

    def __init__(self, collect: Collect, load_weights: LoadWeights, *, max_staleness: int,
                 first_step: int, last_step: int, first_position: int, prompts_per_step: int,
                 version: int) -> None:
        if max_staleness < 1:
            raise ValueError(f"max_staleness must be >= 1 for the producer; got {max_staleness}")
        self.collect = collect
        self.load_weights = load_weights
        self.max_staleness = max_staleness
        self.first_step, self.last_step = first_step, last_step
        self.first_position, self.stride = first_position, prompts_per_step
        self.weights = PublishedWeights(version)
        self.engine_version = version
        self.dropped: Counter[str] = Counter({STALE: 0, UNTRAINED: 0})
        self.started = 0
        self.trained = 0
        self._engine = threading.Lock()  # held while the engine plays a step or is lent out
        self._cond = threading.Condition()
        self._ready: dict[int, ProducedStep] = {}
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._engine_idle = 0.0
        self._idle_since: float | None = None  # the producer is waiting since then
        self._learner_idle = 0.0
        self._mark = (time.perf_counter(), 0.0)  # (time of the last take, engine idle then)

    # ------------------------------------------------------------------ the producer
    def start(self) -> None:
        """Start the producer thread (idempotent)."""
        if self._thread is None:
            self._mark = (time.perf_counter(), 0.0)
            self._thread = threading.Thread(target=self._run, name="rlvr-async-rollout",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            for step in range(self.first_step, self.last_step + 1):
                self._idle_since = time.perf_counter()
                while not self._stop.is_set() and not self.weights.wait_for(
                        step - 1 - self.max_staleness, timeout=0.5):
                    pass
                if self._stop.is_set():
                    return
                with self._engine:
                    self._idle_done()
                    version, tensors = self.weights.take(newer_than=self.engine_version)
                    if tensors is not None:
                        self.load_weights(tensors)
                        self.engine_version = version
                    version = self.engine_version
                    position = self.first_position + (step - self.first_step) * self.stride
                    trajectories, metrics = self.collect(step, position)
                stamp(trajectories, version)
                with self._cond:
                    self.started += len(trajectories)
                    self._ready[step] = ProducedStep(step, trajectories, metrics, version)
                    if self._stop.is_set():  # produced after the end: never trained
                        self._drop_ready()
                    self._cond.notify_all()
        except BaseException as exc:  # handed to the learner by take()
            with self._cond:
                self._error = exc
                self._cond.notify_all()
        finally:
            self._idle_done()

    def _idle_done(self) -> None:
        since, self._idle_since = self._idle_since, None
        if since is not None:
            self._engine_idle += time.perf_counter() - since

    def _drop_ready(self) -> None:
        """Count every produced, untaken episode as dropped (holding ``_cond``)."""
        for produced in self._ready.values():
            self.dropped[UNTRAINED] += len(produced.trajectories)
        self._ready.clear()

    # ------------------------------------------------------------------ the learner's side
    def publish(self, version: int, named_tensors: Any) -> None:
        """The learner's weights after update ``version`` (copied; see ``PublishedWeights``)."""
        self.weights.publish(version, named_tensors)

    def take(self, step: int, learner_version: int) -> tuple[list[Trajectory], dict[str, float]]:
        """This rank's trainable episodes of ``step`` (blocks until produced) and the metrics.

        Rows staler than ``max_staleness`` at ``learner_version`` are dropped (``stale``).

        Raises:
            AsyncRolloutError: the producer failed (its error chained), or every row was stale.
        """
        self.start()
        waited = time.perf_counter()
        with self._cond:
            self._cond.wait_for(lambda: step in self._ready or self._error is not None)
            if step not in self._ready:
                raise AsyncRolloutError(f"step {step}: the rollout producer failed: "
                                        f"{self._error!r}") from self._error
            produced = self._ready.pop(step)
        now = time.perf_counter()
        self._learner_idle += now - waited
        kept, dropped, ages = split_stale(produced.trajectories, learner_version,
                                          self.max_staleness)
        self.dropped[STALE] += len(dropped)
        self.trained += len(kept)
        if not kept:
            raise AsyncRolloutError(
                f"step {step}: all {len(dropped)} episodes were generated at version "
                f"{produced.version}, more than rollout.max_staleness = {self.max_staleness} "
                f"versions behind the learner ({learner_version})")
        metrics = dict(produced.metrics)
        metrics["async/staleness_mean"] = sum(ages) / len(ages)
        metrics["async/staleness_max"] = float(max(ages))
        metrics["async/episodes_started"] = float(self.started)
        metrics |= {f"async/dropped_{reason}": float(n) for reason, n in self.dropped.items()}
        engine_idle = self._engine_idle + (now - self._idle_since if self._idle_since else 0.0)
        last, idle_then = self._mark
        wall = max(now - last, 1e-9)
        metrics["async/engine_idle_frac"] = min(1.0, (engine_idle - idle_then) / wall)
        metrics["async/learner_idle_frac"] = min(1.0, (now - waited) / wall)
        self._mark = (now, engine_idle)
        return kept, metrics

    @contextlib.contextmanager
    def paused(self, version: int, load: Callable[[], None]) -> Iterator[None]:
        """Lend the engine out (held-out evaluation) with the learner's ``version`` loaded.

        Waits for the producer's current step to finish; ``load`` puts the learner's current
        weights into the engine (the producer then plays on from this newer version).
        """
        with self._engine:
            load()
            self.engine_version = max(self.engine_version, version)
            yield

    def close(self) -> None:
        """Stop the producer, wait for its current step, count what was never trained.

        Idempotent. Call it before the engine closes (the producer's step then finishes).
        """
        self._stop.set()
        self.weights.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=300)
        with self._cond:
            self._drop_ready()

    @property
    def accounted(self) -> bool:
        """Every started episode is trained or dropped (after ``close``)."""
        return self.started == self.trained + sum(self.dropped.values())


def fresh_mismatch(batch: RolloutBatch, learner_version: int,
                   metrics: dict[str, float]) -> dict[str, float]:
    """The sync guard's numbers in asynchronous mode: only rows generated at the learner's version.

    Stage B or the update measured ``rollout/logprob_diff`` and ``rollout/kl`` over every row; on
    rows played by older weights that gap is the off-policy distance, not a sync error. They are
    moved to ``async/logprob_diff`` and ``async/kl``; ``rollout/*`` stays when every row is at
    ``learner_version`` (or records no version), is recomputed over the rows at it when some are
    and stage B set ``old_logprobs``, and is left out otherwise (the guard then does not check
    this step). One rank only (the asynchronous mode refuses more).
    """
    out = dict(metrics)
    measured = {name: out.pop(f"rollout/{name}") for name in ("logprob_diff", "kl")
                if f"rollout/{name}" in out}
    out |= {f"async/{name}": value for name, value in measured.items()}
    old, versions, mask = batch.old_logprobs, batch.policy_versions, batch.response_mask
    fresh = torch.ones(len(batch), dtype=torch.bool) if versions is None else \
        ((versions == learner_version) | (mask == 0)).all(dim=-1).cpu()
    if bool(fresh.all()):
        return out | {f"rollout/{name}": value for name, value in measured.items()}
    rows = mask * fresh[:, None].to(mask)
    if old is None or not bool((rows != 0).any()):
        return out
    with torch.no_grad():
        out["rollout/logprob_diff"] = float(aggregate((old - batch.rollout_logprobs).abs(), rows,
                                                      "token-mean"))
        out["rollout/kl"] = float(aggregate(kl_penalty(batch.rollout_logprobs, old, "k3"), rows,
                                            "token-mean"))
    return out
