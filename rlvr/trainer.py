"""The RL training loop: rollout (A), scoring and advantages (B), policy/critic update (C).

``Trainer.train`` reads like the data flow in ARCHITECTURE.md; everything else (the episode
stream, metrics, checkpoints, held-out evaluation) is an object with a ``maybe_*`` or
``collect`` method.

Distributed layout (SPMD): every rank plays ``prompts_per_step / world_size`` whole groups on its
own engine, computes stage B on its rows and trains on them (FSDP2 averages the gradients).
Advantages (and an in-reward KL) are computed on the whole step's batch, gathered on every rank,
so batch-level whitening (GAE, REINFORCE++) and the adaptive KL controller see the same numbers
as one rank would. Each group's task and sampling seed depend only on ``(seed, step, group)``,
so the same config gives the same episodes on one rank or many, and after a resume.

Deviations and simplifications:

- Rows whose episode failed (``finish_reason == "error"``) are kept with zero scores rather than
  dropped, so every rank keeps the same row count.
- Dynamic sampling (DAPO) refills per rank; when ``max_refill_rounds`` runs out the batch is
  topped up with dropped (zero-advantage) groups, so the batch size stays fixed.
- With one rank and the transformers engine, the engine runs the actor's own (FSDP2) module, so
  there is nothing to sync; with several ranks each has an unsharded copy that receives the full
  weights after each update.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import pickle
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml

from rlvr.advantages import compute_advantages, get_estimator
from rlvr.config import TrainConfig, dump_config, merge
from rlvr.data import RolloutBatch, Trajectory
from rlvr.errors import ConfigError
from rlvr.learner import (
    Actor,
    Checkpointer,
    Critic,
    DistInfo,
    Reference,
    export_hf,
    init_distributed,
    latest_checkpoint,
    prune_checkpoints,
)
from rlvr.learner.worker import barrier
from rlvr.losses import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_in_reward,
    kl_penalty,
)
from rlvr.metrics import MetricsLogger, all_reduce_sums, rollout_metrics


def check_env(config: TrainConfig) -> None:
    """Import the env plugins and build the env once, so a bad id or kwarg fails before work.

    Raises:
        envs.errors.EnvError: an unknown env id (with close matches) or a rejected keyword.
    """
    import envs

    envs.import_plugins(config.env.imports)
    envs.make(config.env.id, **config.env.kwargs).close()
    envs.make(config.env.id, **merge(config.env.kwargs, config.env.eval_kwargs)).close()


def derived_seed(*parts: object) -> int:
    """A 62-bit seed from ``parts`` (stable across processes and Python versions)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


@dataclass
class TrainResult:
    """What a run produced (paths exist on rank 0).

    Attributes:
        output_dir: the run directory.
        metrics_path: ``metrics.jsonl``.
        tensorboard_dir: TensorBoard event files (None when disabled).
        curves_path: ``curves.png`` (None when disabled or nothing to plot).
        export_dir: the exported HF model (None when not exported).
        warmup_accuracy: held-out accuracy before RL (after the warm-up, if any).
        final_accuracy: held-out accuracy after RL.
        warmup_seconds: time from the start to the first RL step: building the model and the
            supervised warm-up (when it runs).
        sft_steps: optimizer steps of the supervised warm-up run by this process (0 if none).
        rl_seconds: time spent in the RL steps of this process.
        total_seconds: wall-clock time of the whole run in this process.
        steps: the last completed RL step.
        history: the logged metrics of this process's steps, in order.
    """

    output_dir: Path
    metrics_path: Path
    tensorboard_dir: Path | None = None
    curves_path: Path | None = None
    export_dir: Path | None = None
    warmup_accuracy: float | None = None
    final_accuracy: float | None = None
    warmup_seconds: float = 0.0
    sft_steps: int = 0
    rl_seconds: float = 0.0
    total_seconds: float = 0.0
    steps: int = 0
    history: list[dict[str, float]] = field(default_factory=list)


class TrainerState:
    """The trainer's own checkpointed state: counters, the KL controller and RNG states.

    Sampling, task choice and shuffles are seeded from ``(seed, step, ...)``, so ``step`` is the
    data position; RNG states are restored too, for user code that draws from global RNGs.
    """

    def __init__(self, kl_controller: FixedKLController | AdaptiveKLController) -> None:
        self.step = 0
        self.episodes = 0
        self.kl_controller = kl_controller

    def state_dict(self) -> dict[str, Any]:
        """Counters, controller and RNG states (picklable values for DCP)."""
        rng = pickle.dumps({"python": random.getstate(), "torch": torch.get_rng_state()})
        return {"step": self.step, "episodes": self.episodes, "rng": rng,
                "kl": self.kl_controller.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``."""
        self.step = int(state["step"])
        self.episodes = int(state["episodes"])
        self.kl_controller.load_state_dict(state["kl"])
        rng = pickle.loads(state["rng"])
        random.setstate(rng["python"])
        torch.set_rng_state(rng["torch"])


class StageTimer:
    """Accumulates wall-clock seconds per stage: ``with timer("rollout"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        """Time the ``with`` block as ``stage``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        """``time/<stage>`` and ``time/step`` in seconds."""
        out = {f"time/{k}": v for k, v in self.seconds.items()}
        out["time/step"] = sum(self.seconds.values())
        return out


# ---------------------------------------------------------------------------- distributed helpers
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


# ---------------------------------------------------------------------------- stage A
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


# ---------------------------------------------------------------------------- side concerns
class Checkpoints:
    """Periodic DCP checkpoints under ``output_dir/checkpoints/step_NNNNNN`` and resume.

    Args:
        checkpointer: saves/loads the actor, critic and trainer state.
        root: the checkpoints directory.
        every: save every this many steps (0 = never).
        keep: how many most recent checkpoints to keep.
    """

    def __init__(self, checkpointer: Checkpointer, root: Path, every: int, keep: int) -> None:
        self.checkpointer = checkpointer
        self.root = root
        self.every = every
        self.keep = keep

    def maybe_resume(self, enabled: bool) -> Path | None:
        """Load the latest complete checkpoint when ``enabled`` and one exists; return it."""
        latest = latest_checkpoint(self.root) if enabled else None
        if latest is not None:
            self.checkpointer.load(latest)
        return latest

    def maybe_save(self, step: int) -> Path | None:
        """Save when ``step`` is due (collective); prune all but the newest ``keep``."""
        if not self.every or step % self.every:
            return None
        path = self.checkpointer.save(self.root / f"step_{step:06d}")
        prune_checkpoints(self.root, self.keep)
        return path


def _suite_for_env(config: TrainConfig, tasks: int, path: Path) -> str:
    """Write a one-entry suite (the training env's held-out split) and return its path."""
    kwargs = merge(config.env.kwargs, config.env.eval_kwargs)
    split = kwargs.pop("split", "test")
    entry = {"env": config.env.id, "name": "heldout", "split": split, "n_tasks": tasks,
             "kwargs": kwargs}
    path.write_text(yaml.safe_dump({"name": "heldout", "entries": [entry]}, sort_keys=False))
    return str(path)


class HeldOut:
    """Held-out greedy evaluation on the training engine (``rlvr.evaluate.Evaluator``).

    Adds ``eval/accuracy`` (pass@1 over the suite) to the evaluator's ``eval/...`` metrics.
    """

    def __init__(self, config: TrainConfig, engine: Any, tokenizer: Any, suite: str,
                 every: int) -> None:
        from rlvr.evaluate import Evaluator

        ev = config.eval
        self.evaluator = Evaluator(
            suite, engine=engine, tokenizer=tokenizer, every=every, samples=ev.samples,
            max_turns=config.rollout.runner.max_turns, max_new_tokens=ev.max_new_tokens,
            seed=config.trainer.seed, progress=False,
        )

    @staticmethod
    def _with_accuracy(metrics: dict[str, float]) -> dict[str, float]:
        for key in ("eval/overall/pass@1", "eval/heldout/pass@1"):
            if key in metrics:
                return {**metrics, "eval/accuracy": metrics[key]}
        return metrics

    def maybe_evaluate(self, step: int) -> dict[str, float]:
        """The metrics when ``step`` is due, else ``{}``."""
        return self._with_accuracy(self.evaluator.maybe_evaluate(step) or {})

    def evaluate(self, step: int) -> dict[str, float]:
        """Evaluate now."""
        return self._with_accuracy(self.evaluator.evaluate(step))


def warm_up(config: TrainConfig, base_dir: Path, tokenizer: Any, info: DistInfo,
            log: Any) -> tuple[Path, Any]:
    """Run the supervised warm-up on rank 0 and save it as ``output_dir/sft_model``.

    Returns:
        ``(policy_dir, SFTResult or None)``: the directory RL starts from (the base model when
        the warm-up is off, or its saved result when resuming) and what the warm-up did.
    """
    from agents.hf_engine import TransformersEngine
    from rlvr.learner import load_causal_lm
    from rlvr.sft import TaskExamples, save_model, supervised_warmup

    target = Path(config.trainer.output_dir) / "sft_model"
    if not config.sft.enabled:
        return base_dir, None
    if (target / "config.json").is_file():
        log(f"[sft] reusing the warm-up model in {target}")
        return target, None
    result = None
    if info.is_main:
        model = load_causal_lm(base_dir, info.device)
        engine = TransformersEngine(model, tokenizer, max_batch_size=64)
        suite = _suite_for_env(config, config.sft.eval_tasks, target.parent / "sft_suite.yaml")
        heldout = HeldOut(config, engine, tokenizer, suite, every=0)
        try:
            result = supervised_warmup(
                model, tokenizer, TaskExamples(config.env.id, config.env.kwargs), config.sft,
                seed=config.trainer.seed, evaluate=lambda: heldout.evaluate(0)["eval/accuracy"],
                log=log, progress=config.trainer.progress,
            )
        finally:
            engine.close()
        save_model(model, tokenizer, target)
    barrier()
    return target, result


# ---------------------------------------------------------------------------- the trainer
class Trainer:
    """Builds every component from a ``TrainConfig`` and runs the RL loop.

    Args:
        config: the validated run config.
        log: where human-readable lines go (rank 0 only).
    """

    def __init__(self, config: TrainConfig, log: Any = print) -> None:
        from transformers import AutoTokenizer

        from rlvr.tiny import tiny_model_dir

        self.start_time = time.perf_counter()
        self.config = cfg = config
        self.dist = init_distributed(cfg.trainer.device)
        self.is_main = self.dist.is_main
        self.log = log if self.is_main else (lambda *_: None)
        self.out = Path(cfg.trainer.output_dir)
        if self.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            dump_config(cfg, self.out / "config.yaml")
        check_env(cfg)
        torch.manual_seed(cfg.trainer.seed)
        random.seed(cfg.trainer.seed)
        if cfg.model.path is None and self.is_main:
            tiny_model_dir(cfg.model.tiny)
        barrier()
        base = Path(cfg.model.path) if cfg.model.path else tiny_model_dir(cfg.model.tiny)
        self.tokenizer = AutoTokenizer.from_pretrained(str(base))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.tokenizer.eos_token_id
        self.policy_dir, self.sft = warm_up(cfg, base, self.tokenizer, self.dist, self.log)
        self.warmup_seconds = time.perf_counter() - self.start_time
        actor_cfg, critic_cfg = cfg.learner_configs()
        self.actor = Actor.from_pretrained(self.policy_dir, actor_cfg, self.dist)
        needs_critic = get_estimator(cfg.algorithm.estimator).needs_critic
        self.critic = Critic.from_pretrained(self.policy_dir, critic_cfg, self.dist) \
            if needs_critic else None
        self.reference = Reference.from_pretrained(self.policy_dir, actor_cfg, self.dist) \
            if cfg.algorithm.kl.enabled else None
        sampling = cfg.rollout.runner.sampling
        self.temperature = sampling.temperature if sampling.temperature > 0 else 1.0
        self.engine, self.shares_weights = self._build_engine()
        from agents.runner import EpisodeRunner

        self.runner = EpisodeRunner(self.engine, self.tokenizer, cfg.rollout.runner)
        self.stream = EpisodeStream(self.runner, cfg, self.dist.rank, self.dist.world_size)
        kl = cfg.algorithm.kl
        controller = AdaptiveKLController(kl.coef, kl.target, kl.horizon) \
            if kl.controller == "adaptive" else FixedKLController(kl.coef)
        self.state = TrainerState(controller)
        states: dict[str, Any] = {"actor": self.actor, "trainer": self.state}
        if self.critic is not None:
            states["critic"] = self.critic
        self.checkpoints = Checkpoints(Checkpointer(states), self.out / "checkpoints",
                                       cfg.trainer.checkpoint_every, cfg.trainer.keep_checkpoints)
        self.resumed_from = self.checkpoints.maybe_resume(cfg.trainer.resume)
        if self.resumed_from is not None:
            self.log(f"[rlvr] resumed from {self.resumed_from} (step {self.state.step})")
            self.sync_weights()
        self.heldout = None
        if self.is_main:
            suite = cfg.eval.suite or _suite_for_env(cfg, cfg.eval.tasks,
                                                     self.out / "eval_suite.yaml")
            self.heldout = HeldOut(cfg, self.engine, self.tokenizer, suite, cfg.eval.every)
        t = cfg.trainer
        self.logger = MetricsLogger(self.out, total_steps=t.steps, start_step=self.state.step,
                                    enabled=self.is_main, tensorboard=t.tensorboard,
                                    progress=t.progress, plot=t.plot)

    def _build_engine(self) -> tuple[Any, bool]:
        """The rollout engine, and whether it runs the actor's own module (nothing to sync)."""
        rollout = self.config.rollout
        if rollout.engine == "sglang":
            from agents.sglang_engine import SGLangEngine

            return SGLangEngine(str(rollout.sglang_url)), False
        from agents.hf_engine import TransformersEngine

        rows = self.stream_rows()
        if self.dist.world_size == 1:
            return TransformersEngine(self.actor.module, self.tokenizer, max_batch_size=rows), True
        from rlvr.learner import load_causal_lm

        module = load_causal_lm(self.policy_dir, self.dist.device)
        return TransformersEngine(module, self.tokenizer, max_batch_size=rows), False

    def stream_rows(self) -> int:
        """Episodes each rank plays per step (the engine's batch size)."""
        r = self.config.rollout
        return max(1, r.prompts_per_step // self.dist.world_size) * r.group_size

    # ------------------------------------------------------------------ the loop
    def train(self) -> TrainResult:
        """Run the remaining RL steps, evaluate, export; returns what was produced."""
        cfg = self.config
        result = TrainResult(output_dir=self.out, metrics_path=self.logger.jsonl_path,
                             warmup_seconds=self.warmup_seconds,
                             sft_steps=self.sft.steps if self.sft is not None else 0)
        if self.state.step == 0 and self.heldout is not None:
            with self.engine_weights():
                before = self.heldout.evaluate(0)
            self.logger.log(0, before)
            result.warmup_accuracy = before.get("eval/accuracy")
            self.log(f"[rlvr] held-out accuracy before RL: {_pct(result.warmup_accuracy)}")
        rl_start = time.perf_counter()
        for step in range(self.state.step + 1, cfg.trainer.steps + 1):
            timer = StageTimer()
            with timer("rollout"), self.engine_weights():          # stage A
                trajs, metrics = self.stream.collect(step)
                self.release_engine_memory()
            with timer("prepare"):                                   # stage B
                batch = RolloutBatch.from_trajectories(trajs, self.pad_id).to(self.dist.device)
                metrics |= self.prepare(batch)
            with timer("update"):                                    # stage C
                metrics |= self.update(batch)
            with timer("sync"):
                self.sync_weights()
            self.state.step = step
            self.state.episodes += len(trajs) * self.dist.world_size
            metrics |= rollout_metrics(trajs, self.dist.device)
            metrics |= self._throughput(batch, timer, metrics["perf/rollout_tokens"])
            if self.heldout is not None:
                with timer("eval"), self.engine_weights():
                    metrics |= self.heldout.maybe_evaluate(step)
            metrics |= timer.metrics()
            self.logger.log(step, metrics)
            result.history.append(metrics)
            self.checkpoints.maybe_save(step)
        result.rl_seconds = time.perf_counter() - rl_start
        return self.finish(result)

    # ------------------------------------------------------------------ stages
    def prepare(self, batch: RolloutBatch) -> dict[str, float]:
        """Stage B: old/ref logprobs, values, KL-in-reward, advantages (set on ``batch``)."""
        cfg, t = self.config.algorithm, self.temperature
        mask = batch.response_mask
        batch.set("old_logprobs", self.actor.compute_logprobs(batch, t))
        metrics = self._mismatch(batch)
        if self.reference is not None:
            batch.set("ref_logprobs", self.reference.compute_logprobs(batch, t))
        if self.critic is not None:
            batch.set("values", self.critic.compute_values(batch))
        rank, b, r = self.dist.rank, len(batch), batch.response_len
        rewards = gather_rows(batch.token_level_scores)
        full_mask = gather_rows(mask)
        if cfg.kl.placement == "reward" and batch.ref_logprobs is not None:
            rewards, kl_metrics = apply_kl_in_reward(
                rewards, gather_rows(batch.require("old_logprobs")),
                gather_rows(batch.ref_logprobs), full_mask, self.state.kl_controller,
                cfg.kl.estimator)
            metrics |= {f"kl/{k}": v for k, v in kl_metrics.items()}
        values = gather_rows(batch.values) if batch.values is not None else None
        advantages, returns = compute_advantages(
            cfg.estimator, rewards, full_mask, values=values,
            group_ids=gather_objects(list(batch.group_ids)), gamma=cfg.gamma, lam=cfg.lam)
        rows = slice(rank * b, (rank + 1) * b)
        batch.set("token_level_rewards", rewards[rows, :r].contiguous())
        batch.set("advantages", advantages[rows, :r].contiguous())
        batch.set("returns", returns[rows, :r].contiguous())
        return metrics

    def _mismatch(self, batch: RolloutBatch) -> dict[str, float]:
        """How far the engine's logprobs are from the actor's recomputed ones (all ranks)."""
        mask = batch.response_mask
        old, rollout = batch.require("old_logprobs"), batch.rollout_logprobs
        diff = ((old - rollout).abs() * mask).sum()
        kl = (kl_penalty(rollout, old, "k3") * mask).sum()
        sums = all_reduce_sums([float(diff), float(kl), float(mask.sum())], self.dist.device)
        n = max(sums[2], 1.0)
        return {"rollout/logprob_diff": sums[0] / n, "rollout/kl": sums[1] / n}

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """Stage C: the actor's PPO update, then the critic's (when there is one)."""
        metrics = self.actor.update(batch, self.temperature)
        if self.critic is not None:
            metrics |= self.critic.update(batch)
        return metrics

    def engine_weights(self) -> contextlib.AbstractContextManager[Any]:
        """Keep the actor's weights gathered while the engine generates with them."""
        return self.actor.gathered() if self.shares_weights else contextlib.nullcontext()

    def sync_weights(self) -> None:
        """Give the rollout engine the actor's new weights (collective).

        SGLang servers get their memory back first, then reload the exported weights from
        disk (one call per node, by local rank 0).
        """
        if self.shares_weights:
            return
        if self.config.rollout.engine != "sglang":
            self.engine.update_weights(self.actor.named_full_tensors())
            return
        path = export_hf(self.actor.module, self.out / "weights_sync")
        if self.dist.local_rank == 0:
            self.engine.resume_memory()
            self.engine.update_weights(str(path))
        barrier()

    def release_engine_memory(self) -> None:
        """Let SGLang servers free their GPU memory for training (no-op for transformers)."""
        if self.config.rollout.engine == "sglang":
            barrier()
            if self.dist.local_rank == 0:
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
            last = result.history[-1] if result.history else {}
            final = last
            if "eval/accuracy" not in last:
                with self.engine_weights():
                    final = self.heldout.evaluate(self.state.step)
                self.logger.log(self.state.step, final)
            result.final_accuracy = final.get("eval/accuracy")
        if cfg.trainer.export_at_end:
            result.export_dir = self.export()
        result.curves_path = self.logger.close()
        result.tensorboard_dir = self.logger.tensorboard_dir if cfg.trainer.tensorboard else None
        result.steps = self.state.step
        result.total_seconds = time.perf_counter() - self.start_time
        self.close()
        self.log(summary(result))
        return result

    def export(self, path: str | Path | None = None) -> Path:
        """Write the current policy as a HF directory (default ``output_dir/export``)."""
        return export_hf(self.actor.module, path or self.out / "export", self.tokenizer)

    def close(self) -> None:
        """Stop the engine and the runner's env threads."""
        self.runner.close()
        self.engine.close()


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def summary(result: TrainResult) -> str:
    """The human-readable end-of-run summary."""
    lines = [
        f"== rlvr train finished: {result.steps} RL steps in {result.total_seconds:.1f} s "
        f"(set-up{' and warm-up' if result.sft_steps else ''} {result.warmup_seconds:.1f} s, "
        f"RL {result.rl_seconds:.1f} s) ==",
    ]
    if result.final_accuracy is not None:
        line = f"held-out accuracy: {_pct(result.warmup_accuracy)} before RL -> " \
               f"{_pct(result.final_accuracy)} after RL"
        if result.warmup_accuracy is not None:
            line += f" ({100 * (result.final_accuracy - result.warmup_accuracy):+.1f} points)"
        lines.append(line)
    paths = [("metrics", result.metrics_path), ("tensorboard", result.tensorboard_dir),
             ("curves", result.curves_path), ("model", result.export_dir)]
    lines += [f"  {name + ':':13s}{path}" for name, path in paths if path is not None]
    return "\n".join(lines)


def train(config: TrainConfig, log: Any = print) -> TrainResult:
    """Build a ``Trainer`` for ``config`` and run it (the Python form of ``rlvr train``)."""
    return Trainer(config, log=log).train()
