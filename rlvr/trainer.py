"""The RL training loop: rollout (A), scoring and advantages (B), policy/critic update (C).

``Trainer.train`` reads like the data flow in docs/concepts.md; everything else (the episode
stream, metrics, checkpoints, held-out evaluation, the warm-up) lives in ``rlvr.training`` as
objects with a ``maybe_*`` or ``collect`` method.

Distributed layout (SPMD): every rank plays ``prompts_per_step / world_size`` whole groups on its
own engine, computes stage B on its rows and trains on them (FSDP2 averages the gradients).
Advantages (and an in-reward KL) are computed on the whole step's batch, gathered on every rank,
so batch-level whitening (GAE, REINFORCE++) and the adaptive KL controller see the same numbers
as one rank would. Tasks are drawn in epochs without replacement (``rlvr.training.tasks``), the
position is checkpointed, and each group's sampling seed depends only on ``(seed, step, group)``,
so the same config gives the same episodes on one rank or many, and after a resume.

Deviations and simplifications:

- Rows whose episode ended in an env/sandbox error (``finish_reason == "error"``) are kept, so
  every rank keeps the same row count, but with ``RolloutBatch.valid`` False and response mask 0:
  they are left out of their group's statistics and of every loss (``rlvr.batch``), and counted
  in ``rollout/error_episodes`` (over all ranks).
- Dynamic sampling (DAPO) refills per rank (its metrics reduced over ranks); when
  ``max_refill_rounds`` runs out the batch is topped up with dropped (zero-advantage) groups, so
  the batch size stays fixed.
- With one rank and the transformers engine, the engine runs the actor's own (FSDP2) module, so
  there is nothing to sync; with several ranks each has an unsharded copy that receives the full
  weights after each update.
- When the actor's update is one optimizer step (one epoch, one mini-batch) and no KL goes in
  the reward, stage B does not recompute the old logprobs: the update takes them from its own
  forward, where they are the same numbers (``Actor.set_old_logprobs``).
- Stage A, the weight sync and the bracket of held-out evaluations go through one rollout
  source chosen once (``rlvr.training.rollout_source``); the loop never asks which.
- ``rollout.max_staleness >= 1`` (asynchronous RL, ``rlvr.training.async_source``): a producer
  thread plays the episodes on the engine's own copy of the weights, up to k steps ahead; stage
  A takes them, the old logprobs (decoupled PPO's proximal policy: the learner's before the
  update, from stage B or the one-step update's own forward, as above) meet the engine's through
  ``actor.tis_cap``, and the sync publishes the new weights for the producer instead of pushing
  them into the engine (``rollout.inflight_update``: the producer pushes them in mid-generation).
  With several ranks each rank runs its own producer on its own engine copy (transformers engine
  only); the producer's path makes no collective, so the default process group stays the
  learner thread's. Taking a step is collective (``AsyncRollout.take``: the ranks agree on a
  failed producer and reduce the metrics), rows dropped as stale stay as invalid rows (equal row
  counts), and a held-out evaluation pauses every rank's producer for the weight sync.
"""

from __future__ import annotations

import contextlib
import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlvr.agents.engine import VersionedEngine
from rlvr.algorithms.advantages import AdvantageInputs, compute_advantages, get_estimator
from rlvr.algorithms.kl import apply_kl_in_reward, build_controller
from rlvr.batch import RolloutBatch
from rlvr.config import TrainConfig
from rlvr.config.loader import dump_config, to_dict
from rlvr.distributed import all_reduce_sums, barrier, gather_objects, gather_rows
from rlvr.learner import (
    Actor,
    Checkpointer,
    Critic,
    export_adapter,
    export_hf,
    free_cached_memory,
    init_distributed,
    reference_for,
)
from rlvr.metrics import MetricsLogger, rollout_metrics
from rlvr.tool_metrics import tool_metrics
from rlvr.tracking import RunInfo, episode_table
from rlvr.training.async_source import AsyncSource
from rlvr.training.distill import Distiller
from rlvr.training.env_failures import EnvFailureGuard
from rlvr.training.env_tokens import EnvTokenGuard
from rlvr.training.gc_control import frozen_setup
from rlvr.training.heldout import heldout_evaluator
from rlvr.training.model_folder import model_folder
from rlvr.training.preflight import RunPlan, preflight
from rlvr.training.reward_watch import RewardWatch
from rlvr.training.rollout_source import (
    RolloutParts,
    RolloutSource,
    StepEpisodes,
    SyncRollout,
)
from rlvr.training.run_dir import RunLock, apply_plan
from rlvr.training.snapshots import EpisodeSnapshots
from rlvr.training.state import Checkpoints, StageTimer, TrainerState
from rlvr.training.stream import EpisodeStream, reduce_sampling_metrics
from rlvr.training.sync_guard import SyncGuard
from rlvr.training.warmup import warm_up
from rlvr.trajectory import logprob_temperature

if TYPE_CHECKING:
    from rlvr.agents.engine_registry import BuiltEngine

#: Held-out episodes given to the loggers' tables after each evaluation (W&B's eval/episodes).
EPISODES_PER_EVAL = 16

__all__ = ["StageTimer", "TrainResult", "Trainer", "preflight", "summary", "train"]


@dataclass
class TrainResult:
    """What a run produced (paths exist on rank 0).

    Attributes:
        output_dir: the run directory.
        metrics_path: ``metrics.jsonl``.
        tensorboard_dir: TensorBoard event files (None when disabled).
        curves_path: ``curves.png`` (None when disabled or nothing to plot).
        export_dir: the exported HF model (None when not exported).
        episodes_path: ``episodes.html``, held-out episodes before and after RL (None when
            ``eval.show_episodes`` is 0).
        warmup_accuracy: held-out accuracy before RL (after the warm-up, if any).
        final_accuracy: held-out accuracy after RL (None when not measured).
        heldout_unmeasured: why the held-out accuracy after RL is n/a (every episode errored).
        warmup_seconds: time from the start to the first RL step: building the model and the
            supervised warm-up (when it runs).
        sft_steps: optimizer steps of the supervised warm-up run by this process (0 if none).
        rl_seconds: time spent in the RL steps of this process.
        total_seconds: wall-clock time of the whole run in this process.
        steps: the last completed RL step.
        first_step: the first RL step this process ran (after a resume, the one after the
            checkpoint's).
        failed_loggers: loggers (``trainer.loggers``) that failed and were disabled: name ->
            what they were doing and the error.
        history: the logged metrics of this process's steps, in order, each with its ``step``
            (left out of the repr).
    """

    output_dir: Path
    metrics_path: Path
    tensorboard_dir: Path | None = None
    curves_path: Path | None = None
    export_dir: Path | None = None
    episodes_path: Path | None = None
    heldout_unmeasured: str | None = None
    warmup_accuracy: float | None = None
    final_accuracy: float | None = None
    warmup_seconds: float = 0.0
    sft_steps: int = 0
    rl_seconds: float = 0.0
    total_seconds: float = 0.0
    steps: int = 0
    first_step: int = 1
    failed_loggers: dict[str, str] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list, repr=False)


class Trainer:
    """Builds every component from a ``TrainConfig`` and runs the RL loop.

    Args:
        config: the validated run config.
        log: where human-readable lines go (rank 0 only).
        plan: what ``rlvr.training.preflight.preflight`` found for ``config`` (``rlvr train``
            runs it first); None runs it here, once the run folder is locked.
    """

    def __init__(self, config: TrainConfig, log: Any = print, plan: RunPlan | None = None
                 ) -> None:
        self.start_time = time.perf_counter()
        self.config = config
        self.threads_before = torch.get_num_threads()  # restored by close()
        self.closed = False
        if config.trainer.threads is not None:
            torch.set_num_threads(config.trainer.threads)
        if not config.trainer.progress:  # no third-party bars either (model loading)
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        self.dist = init_distributed(config.trainer.device)
        self.is_main = self.dist.is_main
        self.log = log if self.is_main else (lambda *_: None)
        self.out = Path(config.trainer.output_dir)
        self.lock: RunLock | None = None
        if self.is_main:  # one run per folder: a second writer is refused before any work
            self.out.mkdir(parents=True, exist_ok=True)
            self.lock = RunLock(self.out)
        try:
            self._build(plan or preflight(config))
        except BaseException:
            self.close()  # what was built before the failure: a launched server, the lock
            raise

    def _build(self, plan: RunPlan) -> None:
        """Everything after the run folder's lock, from the preflight's plan: the models."""
        from transformers import AutoTokenizer

        self.config = cfg = plan.config  # a resume keeps its checkpoint's schedule
        barrier()  # every rank has looked at the folder before rank 0 writes to it
        for line in plan.folder.notices:
            self.log(line)
        if self.is_main:
            apply_plan(plan.folder)
            if not cfg.trainer.resume:  # a resume writes it once its checkpoint has loaded
                dump_config(cfg, self.out / "config.yaml")  # the config that runs
        torch.manual_seed(cfg.trainer.seed)
        random.seed(cfg.trainer.seed)
        if self.is_main:  # build the tiny model or import a .gguf file once, on one rank
            model_folder(cfg.model)
        barrier()
        base = model_folder(cfg.model)
        self.tokenizer = AutoTokenizer.from_pretrained(str(base))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.tokenizer.eos_token_id
        plan.check_prompts(self.tokenizer, base, self.log)  # before the warm-up: no silent 0%
        # before the warm-up: a teacher with another tokenizer is refused at once
        self.distiller = Distiller.from_config(cfg.teacher, self.tokenizer,
                                               cfg.learner_configs()[0], self.dist)
        self.policy_dir, self.sft = warm_up(cfg, base, self.tokenizer, self.dist, self.log)
        self.warmup_seconds = time.perf_counter() - self.start_time
        actor_cfg, critic_cfg = cfg.learner_configs()
        self.actor = Actor.from_pretrained(self.policy_dir, actor_cfg, self.dist)
        needs_critic = get_estimator(cfg.algorithm.estimator).needs_critic
        self.critic = Critic.from_pretrained(self.policy_dir, critic_cfg, self.dist) \
            if needs_critic else None
        self.reference = reference_for(self.actor, self.policy_dir, actor_cfg, self.dist) \
            if cfg.algorithm.kl.enabled else None
        sampling = cfg.rollout.runner.sampling
        self.temperature = logprob_temperature(sampling.temperature)
        source = AsyncSource if cfg.rollout.max_staleness else SyncRollout  # chosen once
        built = self._build_engine(own_weights=source.own_weights)
        self.engine, self.shares_weights = built.engine, built.shares_weights
        self.adapter_sync = built.serves_adapter
        self.sync_guard = SyncGuard(cfg.rollout.max_logprob_diff, built.dtype, cfg.rollout.engine)
        from rlvr.agents.runner import EpisodeRunner

        self.runner = EpisodeRunner(self.engine, self.tokenizer, cfg.runner_config())
        self.stream = EpisodeStream(self.runner, cfg.env, cfg.rollout, cfg.trainer.seed,
                                    rank=self.dist.rank, world_size=self.dist.world_size,
                                    num_tasks=plan.num_tasks)
        self.env_guard = EnvTokenGuard(self.tokenizer)  # env tokens are never trained
        self.failures = EnvFailureGuard(cfg.trainer.max_failed_steps, cfg.env.id,
                                        self.dist.device)
        self.snapshots = EpisodeSnapshots(self.out / "episodes.html", cfg.eval.show_episodes)
        self.reward_watch = RewardWatch()  # warns after steps that cannot teach anything
        kl = cfg.algorithm.kl
        if kl.placement == "both":
            self.log(kl_notice(kl))
        self.state = TrainerState(build_controller(kl.reward.controller, kl.reward.coef,
                                                   kl.reward.target, kl.reward.horizon))
        states: dict[str, Any] = {"actor": self.actor, "trainer": self.state}
        if self.critic is not None:
            states["critic"] = self.critic
        self.checkpoints = Checkpoints(Checkpointer(states), self.out / "checkpoints",
                                       cfg.trainer.checkpoint_every, cfg.trainer.keep_checkpoints)
        self.resumed_from = self.checkpoints.maybe_resume(cfg.trainer.resume, self.log)
        if self.resumed_from is not None:
            self.log(f"[rlvr] resumed from {self.resumed_from} (step {self.state.step})")
        if self.is_main and cfg.trainer.resume:
            dump_config(cfg, self.out / "config.yaml")  # the config that runs
        self.rollout: RolloutSource = source(self._rollout_parts())
        self.rollout.sync(self.state.step)  # also on a fresh run: the engine may hold others
        self.heldout = None
        if self.is_main:
            self.heldout = heldout_evaluator(cfg, self.engine, self.tokenizer,
                                             suite=cfg.eval.suite, tasks=cfg.eval.tasks,
                                             every=cfg.eval.every,
                                             suite_path=self.out / "eval_suite.yaml",
                                             log=self.log)
        t = cfg.trainer
        run = RunInfo(run_dir=self.out, name=self.out.resolve().name, config=to_dict(cfg),
                      resume=t.resume, start_step=self.state.step)
        self.logger = MetricsLogger(self.out, total_steps=t.steps, start_step=self.state.step,
                                    enabled=self.is_main, loggers=t.active_loggers(), run=run,
                                    progress=t.progress, plot=t.plot, report=self.log)

    def _build_engine(self, own_weights: bool) -> BuiltEngine:
        """The rollout engine, built by ``rlvr.agents.engine_registry`` from ``rollout.engine``.

        With one rank an in-process engine runs the actor's own module (nothing to sync),
        unless ``own_weights`` (the rollout source generates beside the update: the engine
        needs its own copy); the options of engine X are ``rollout.X`` (e.g. ``rollout.sglang``).
        """
        from rlvr.agents.engine_registry import EngineRequest, build_engine

        rollout = self.config.rollout
        return build_engine(EngineRequest(
            engine=rollout.engine,
            model_path=self.policy_dir,
            module=self.actor.module if self.dist.world_size == 1 and not own_weights else None,
            tokenizer=self.tokenizer,
            max_batch_size=self.stream_rows(),
            device=str(self.dist.device),
            leader=self.dist.rank == 0,
            world_size=self.dist.world_size,
            work_dir=self.out,
            options=rollout.engine_options,
            lora=lora.peft_kwargs() if (lora := self.config.actor.lora) is not None else None,
        ))

    def stream_rows(self) -> int:
        """Episodes each rank plays per step (the engine's batch size)."""
        r = self.config.rollout
        return max(1, r.prompts_per_step // self.dist.world_size) * r.group_size

    # ------------------------------------------------------------------ the loop
    def train(self) -> TrainResult:
        """Run the remaining RL steps, evaluate, export; returns what was produced.

        The trainer is closed at the end, also when a step raises or the run is interrupted
        (Ctrl-C): the engine and its threads stop, the metric files are flushed and closed.
        The first error is the one raised: a failure while closing after it (a full disk
        failing ``curves.png`` after the checkpoint) is added to it as a note, never in its
        place.
        """
        try:
            with frozen_setup():
                return self._train()
        except BaseException as err:
            try:
                self.close()
            except BaseException as late:  # reported beside the first error, not instead
                err.add_note(f"while closing after this error, another failed: "
                             f"{type(late).__name__}: {late}")
            raise
        finally:
            self.close()

    def _train(self) -> TrainResult:
        cfg = self.config
        result = TrainResult(output_dir=self.out, metrics_path=self.logger.jsonl_path,
                             warmup_seconds=self.warmup_seconds,
                             sft_steps=self.sft.steps if self.sft is not None else 0)
        if self.state.step == 0 and self.heldout is not None:
            with self.engine_weights():
                before = self.heldout.evaluate(0)
            self._log(0, before)
            result.warmup_accuracy = before.get("eval/accuracy")
            self.snapshots.take("before RL (step 0)", self.heldout)
            self.log(f"[rlvr] held-out accuracy before RL: {_pct(result.warmup_accuracy)}"
                     + (f" ({self.heldout.unmeasured})" if self.heldout.unmeasured else ""))
        elif self.state.step > 0:  # resumed: the accuracy before RL is in the run's metrics
            result.warmup_accuracy = self._logged(0).get("eval/accuracy")
        result.first_step = self.state.step + 1
        rl_start = time.perf_counter()
        for step in range(self.state.step + 1, cfg.trainer.steps + 1):
            result.history.append({"step": float(step), **self._step(step)})
            self.checkpoints.maybe_save(step)
        result.rl_seconds = time.perf_counter() - rl_start
        self.rollout.finish()  # the engine holds the last weights for the final evaluation
        return self.finish(result)

    def _step(self, step: int) -> dict[str, float]:
        """One RL step: stages A, B and C, the sync, the metrics; returns what was logged."""
        cfg, timer = self.config, StageTimer()
        drawn = self.state.tasks_drawn
        with timer("rollout"):                                       # stage A
            episodes = self.rollout.take(step, drawn, self.state.step)
        trajs = episodes.trajectories
        metrics = reduce_sampling_metrics(episodes.metrics, self.dist.device)
        self.failures.check(step, trajs)  # a step with no valid episode teaches nothing
        self.rollout.ahead(step, drawn + cfg.rollout.prompts_per_step)  # beside stages B and C
        with timer("prepare"):                                       # stage B
            batch = episodes.batch(self.pad_id).to(self.dist.device)
            metrics |= self.prepare(batch, episodes)
            metrics |= self.env_guard.check(batch)
        with timer("update"):                                        # stage C
            metrics |= self.update(batch)
        metrics = self.rollout.guard_metrics(batch, self.state.step, metrics)
        self.sync_guard.check(step, metrics)  # the last sync landed (engine == learner)
        with timer("sync"):
            self.rollout.after_update(step)
        self.state.step = step
        self.state.tasks_drawn += cfg.rollout.prompts_per_step
        self.state.episodes += len(trajs) * self.dist.world_size
        played = episodes.played()  # not rows the source left out
        metrics |= rollout_metrics(played, self.dist.device)
        metrics |= tool_metrics(played, self.dist.device)
        metrics |= self._throughput(batch, timer, metrics["perf/rollout_tokens"])
        if (bracket := self.rollout.evaluation(step)) is not None:
            with timer("eval"), bracket:
                if self.heldout is not None:
                    metrics |= self.heldout.maybe_evaluate(step) or {}
        metrics |= timer.metrics()
        self._log(step, metrics)
        if (flat := self.reward_watch.observe(metrics)) is not None:
            self.log(flat)
        return metrics

    def _rollout_parts(self) -> RolloutParts:
        """What the rollout source is built from (after a resume: its step and position)."""
        cfg = self.config
        return RolloutParts(
            stream=self.stream, engine=self.engine, push=self.sync_weights,
            engine_weights=self.engine_weights, release_memory=self.release_engine_memory,
            learner_tensors=lambda: self.actor.named_sync_tensors(adapter_only=self.adapter_sync),
            score_rows=lambda *args, **kwargs: self.actor.compute_logprobs(*args, **kwargs),
            pad_id=self.pad_id, device=self.dist.device,
            world_size=self.dist.world_size, max_staleness=cfg.rollout.max_staleness,
            inflight_update=cfg.rollout.inflight_update, open_ahead=cfg.rollout.open_ahead,
            prompts_per_step=cfg.rollout.prompts_per_step, engine_name=cfg.rollout.engine,
            first_step=self.state.step + 1, last_step=cfg.trainer.steps,
            first_position=self.state.tasks_drawn, evaluating=self.is_main,
            eval_every=cfg.eval.every, log=self.log)

    # ------------------------------------------------------------------ stages
    def prepare(self, batch: RolloutBatch, episodes: StepEpisodes | None = None
                ) -> dict[str, float]:
        """Stage B: old/ref logprobs, values, KL-in-reward, advantages (set on ``batch``).

        ``episodes``: the step's episodes ``batch`` was made of; their rows left out on purpose
        (``StepEpisodes.left_out_rows``) are not valid, but not error episodes either. None:
        no row was left out.
        """
        cfg, t = self.config.algorithm, self.temperature
        mask = batch.response_mask
        metrics = self.actor.set_old_logprobs(batch, t, needed_before_update=cfg.kl.in_reward)
        if self.reference is not None:
            batch.set("ref_logprobs", self.reference.compute_logprobs(batch, t))
        if self.critic is not None:
            batch.set("values", self.critic.compute_values(batch))
        rank, b, r = self.dist.rank, len(batch), batch.response_len
        rewards = gather_rows(batch.token_level_scores)
        full_mask = gather_rows(mask)
        left_out = StepEpisodes([], {}).left_out_rows(batch) if episodes is None \
            else episodes.left_out_rows(batch)
        flags = gather_rows(torch.stack([batch.rows_valid().long(), left_out], 1))
        valid = flags[:, 0].bool()  # rows left out (async: stale) are not error episodes:
        metrics["rollout/error_episodes"] = float((~valid).sum() - flags[:, 1].sum())
        if cfg.kl.in_reward and batch.ref_logprobs is not None:
            rewards, kl_metrics = apply_kl_in_reward(
                rewards, gather_rows(batch.require("old_logprobs")),
                gather_rows(batch.ref_logprobs), full_mask, self.state.kl_controller,
                cfg.kl.reward.estimator)
            metrics |= {f"kl/{k}": v for k, v in kl_metrics.items()}
        values = gather_rows(batch.values) if batch.values is not None else None
        advantages, returns = compute_advantages(cfg.estimator, AdvantageInputs(
            rewards, full_mask, values=values, group_ids=gather_objects(list(batch.group_ids)),
            valid=valid, gamma=cfg.gamma, lam=cfg.lam))
        rows = slice(rank * b, (rank + 1) * b)
        batch.set("token_level_rewards", rewards[rows, :r].contiguous())
        batch.set("advantages", advantages[rows, :r].contiguous())
        batch.set("returns", returns[rows, :r].contiguous())
        if self.distiller is not None:  # the teacher's per-token signal (rlvr.algorithms.distill)
            metrics |= self.distiller.apply(batch, t)
        return metrics

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """Stage C: the actor's PPO update, then the critic's (when there is one).

        torch warns that the scheduler stepped "before optimizer.step()" when an optimizer
        step was skipped (a non-finite gradient): the schedule still advances once per
        training step, as documented, so that warning is false here and is not shown.
        """
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step")
            metrics = self.actor.update(batch, self.temperature)
            if self.critic is not None:
                metrics |= self.critic.update(batch)
        return metrics

    def engine_weights(self) -> contextlib.AbstractContextManager[Any]:
        """Keep the actor's weights gathered while the engine generates with them."""
        return self.actor.gathered() if self.shares_weights else contextlib.nullcontext()

    def sync_weights(self, version: int | None = None) -> None:
        """Give the rollout engine the actor's new weights (collective).

        Colocated order: the learner frees its cached memory, the engine takes back its
        weights' memory only, receives the full tensors one at a time (it casts, buckets and
        sends them; engines on other ranks than the leader drain them), and only then its KV
        cache and CUDA graphs. ``version``: named on an engine that records versions (the
        asynchronous source's producers read it), None to name none.
        """
        if self.shares_weights:
            return
        free_cached_memory(self.dist.device)
        self.engine.resume_memory(("weights",))
        self.engine.update_weights(self.actor.named_sync_tensors(adapter_only=self.adapter_sync))
        self.engine.resume_memory()
        if version is not None and isinstance(self.engine, VersionedEngine):
            # named before the barrier: the other ranks' producers read this run's version,
            # never a number an earlier run left on the servers
            self.engine.set_weight_version(version)
        barrier()  # no rank generates before the new weights are in

    def release_engine_memory(self) -> None:
        """Let the engine free accelerator memory for training (a no-op where none is held)."""
        barrier()
        self.engine.release_memory()
        barrier()

    def _throughput(self, batch: RolloutBatch, timer: StageTimer,
                    rollout_tokens: float) -> dict[str, float]:
        """Tokens per second of the rollout (model tokens) and of training (all tokens)."""
        tokens = all_reduce_sums([float(batch.attention_mask.sum())], self.dist.device)[0]
        train_s = timer.seconds.get("prepare", 0.0) + timer.seconds.get("update", 0.0)
        return {"perf/train_tokens_per_s": tokens / max(train_s, 1e-9),
                "perf/rollout_tokens_per_s": rollout_tokens / max(timer.seconds["rollout"], 1e-9)}

    # ------------------------------------------------------------------ the end
    def finish(self, result: TrainResult) -> TrainResult:
        """Final held-out evaluation, export, curves and the summary; closes the engine."""
        cfg = self.config
        if self.heldout is not None:
            last = result.history[-1] if result.history else self._logged(self.state.step)
            final = last
            if not any(key.startswith("eval/") for key in last):  # not evaluated at this step
                with self.engine_weights():
                    final = self.heldout.evaluate(self.state.step)
                self._log(self.state.step, final)
            result.final_accuracy = final.get("eval/accuracy")
            result.heldout_unmeasured = self.heldout.unmeasured
            self.snapshots.take(f"after RL (step {self.state.step})", self.heldout)
            result.episodes_path = self.snapshots.write()
        if cfg.trainer.export_at_end:
            result.export_dir = self.export()
        result.curves_path = self.logger.close(
            artifacts={"config": self.out / "config.yaml", "episodes": result.episodes_path,
                       "model": result.export_dir}, summary=final_numbers(result))
        result.failed_loggers = self.logger.failed
        result.tensorboard_dir = self.logger.tensorboard_dir \
            if "tensorboard" in cfg.trainer.active_loggers() else None
        result.steps = self.state.step
        result.total_seconds = time.perf_counter() - self.start_time
        self.close()
        self.log(summary(result))
        return result

    def _log(self, step: int, metrics: dict[str, float]) -> None:
        """Log ``metrics`` of ``step``; after a held-out evaluation, a sample of its episodes."""
        self.logger.log(step, metrics)
        if "eval/accuracy" in metrics and self.heldout is not None:
            self.logger.log_table(step, "eval/episodes", episode_table(
                self.heldout.last_records, EPISODES_PER_EVAL))

    def _logged(self, step: int) -> dict[str, Any]:
        """The metrics logged for ``step`` by this run so far (merged lines; {} on ranks > 0).

        A resumed run reads its accuracy before RL, and a finished run resumed again its final
        evaluation, from here (never evaluating and logging it twice).
        """
        from rlvr.metrics import read_jsonl

        path = self.logger.jsonl_path
        if not self.is_main or not path.is_file():
            return {}
        merged: dict[str, Any] = {}
        for record in read_jsonl(path):
            if record.get("step") == step:
                merged |= record
        return merged

    def export(self, path: str | Path | None = None) -> Path:
        """Write the current policy as a HF directory (default ``output_dir/export``)."""
        target = Path(path or self.out / "export")
        lora = self.config.actor.lora
        if lora is None:
            return export_hf(self.actor.module, target, self.tokenizer)
        merged = target.with_name(target.name + "_merged") if lora.export_merged else None
        return export_adapter(self.actor.module, target, lora, self.policy_dir, self.tokenizer,
                              merged_dir=merged)

    def close(self) -> None:
        """Close the metric writers, env threads and engine; restore torch's thread count.

        Idempotent; each step runs even when an earlier one raises.

        The default process group is process-wide (``init_distributed`` reuses it), so it is
        left to the process; the engine's own weight-sync group goes with ``engine.close()``.
        """
        if self.closed:
            return
        self.closed = True
        built = vars(self)  # a construction that failed half-way closes what it had built
        with contextlib.ExitStack() as stack:  # callbacks run last-in first-out
            stack.callback(self._release_lock)
            stack.callback(torch.set_num_threads, self.threads_before)
            if "engine" in built:
                stack.callback(self.engine.close)
            if "runner" in built:
                stack.callback(self.runner.close)
            if "logger" in built:
                stack.callback(self.logger.close, failed=True)  # a no-op after finish()
            if (heldout := built.get("heldout")) is not None:
                stack.callback(heldout.close)
            if "rollout" in built:  # first: its current step ends on a live engine
                stack.callback(self.rollout.close)

    def _release_lock(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def kl_notice(kl: Any) -> str:
    """The NOTICE logged when the KL goes both into the reward and into the loss (as verl)."""
    return (f"[rlvr] NOTICE: KL to the reference is both in the reward (-{kl.reward.coef:g} * "
            f"{kl.reward.estimator}) and in the loss (+{kl.loss.coef:g} * agg("
            f"{kl.loss.estimator})); the policy is pulled toward the reference twice")


def final_numbers(result: TrainResult) -> dict[str, float]:
    """The loggers' summary: the last step's metrics and held-out accuracy before/after RL."""
    last = result.history[-1] if result.history else {}
    numbers = {k: v for k, v in last.items() if k != "step"}
    for key, value in (("eval/accuracy_before_rl", result.warmup_accuracy),
                       ("eval/accuracy", result.final_accuracy)):
        if value is not None:
            numbers[key] = value
    return numbers


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def summary(result: TrainResult) -> str:
    """The human-readable end-of-run summary."""
    ran = result.steps - result.first_step + 1
    if result.first_step == 1:
        steps = f"{result.steps} RL steps"
    elif ran > 0:
        steps = (f"RL steps {result.first_step}-{result.steps} (resumed after step "
                 f"{result.first_step - 1})")
    else:
        steps = f"no RL step left (the run had finished at step {result.steps})"
    lines = [
        f"== rlvr train finished: {steps} in {result.total_seconds:.1f} s "
        f"(set-up{' and warm-up' if result.sft_steps else ''} {result.warmup_seconds:.1f} s, "
        f"RL {result.rl_seconds:.1f} s) ==",
    ]
    if result.final_accuracy is not None:
        line = f"held-out accuracy: {_pct(result.warmup_accuracy)} before RL -> " \
               f"{_pct(result.final_accuracy)} after RL"
        if result.warmup_accuracy is not None:
            line += f" ({100 * (result.final_accuracy - result.warmup_accuracy):+.1f} points)"
        lines.append(line)
    elif result.heldout_unmeasured:
        lines.append(f"held-out accuracy after RL: n/a: {result.heldout_unmeasured}")
    paths = [("metrics", result.metrics_path), ("tensorboard", result.tensorboard_dir),
             ("curves", result.curves_path), ("episodes", result.episodes_path),
             ("model", result.export_dir)]
    lines += [f"  {name + ':':13s}{path}" for name, path in paths if path is not None]
    lines += [f"  logger {name} failed and was disabled ({why})"
              for name, why in result.failed_loggers.items()]
    return "\n".join(lines)


def train(config: TrainConfig, log: Any = print, plan: RunPlan | None = None) -> TrainResult:
    """Build a ``Trainer`` for ``config`` and run it (the Python form of ``rlvr train``).

    ``plan``: the preflight's (``rlvr.training.preflight.preflight``), None to run it here.
    """
    return Trainer(config, log=log, plan=plan).train()
