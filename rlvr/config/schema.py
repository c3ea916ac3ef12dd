"""The typed configuration of ``rlvr train``: one dataclass per component, loaded from YAML.

A YAML file in ``configs/`` only fills these objects; nothing else reads it. Dotted
``key=value`` overrides (``algorithm.kl.placement=loss``) are applied on top by the generic
loader (``rlvr.config.loader``), which checks every key and type before any work starts; each
component checks its ranges with ``rlvr.config_checks`` (declared next to the field with
``bounded``) and the message names the key as typed (``actor.optim.lr must be > 0``).

Component configs owned by other modules are composed, not copied: ``model.tiny`` is
``rlvr.tiny.TinyModelSpec``, ``actor``/``critic`` are ``rlvr.learner.config.ActorSection`` /
``CriticSection`` and ``rollout.runner`` is ``RunnerSection`` (the runner's
``rlvr.agents.runner_config.RunnerLimits`` and a ``sampling: SamplingSection``).

The schema holds only keys a user sets. What a run sets itself (each learner's ``seed`` and
``group_size``, the actor's KL-loss term, the runner's seeds and per-turn token budget) is
runtime context: ``TrainConfig.learner_configs`` and ``TrainConfig.runner_config`` give it to the
components, and a config that writes one of those keys is refused, naming the key to use
instead (``RUNTIME_KEYS``).

Example::

    cfg = load_config("configs/quickstart.yaml", ["trainer.steps=20", "actor.optim.lr=1e-4"])
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from rlvr.agents.engine import SamplingParams
from rlvr.agents.runner_config import RunnerConfig, RunnerLimits
from rlvr.config.engine import EngineSection
from rlvr.config.loader import load, merge
from rlvr.config_checks import Checked, bounded, check_choice, check_fields
from rlvr.errors import ConfigError
from rlvr.learner.config import (
    KL_ESTIMATORS,
    ActorConfig,
    ActorSection,
    CriticConfig,
    CriticSection,
    LearnerSection,
    TeacherConfig,
)
from rlvr.tiny import TinyModelSpec


# ---------------------------------------------------------------------------- components
@dataclass(kw_only=True)
class ModelConfig:
    """Which causal LM to train.

    Attributes:
        path: a local HuggingFace model directory (any causal LM with a chat template), or a
            ``.gguf`` file (needs the ``gguf`` package), imported once into a cached plain
            safetensors folder (``rlvr model import``). When None, the tiny Qwen2 model
            described by ``tiny`` is built locally (no download).
        tiny: the shape of the locally built tiny model; used only when ``path`` is None.
    """

    path: str | None = None
    tiny: TinyModelSpec = field(default_factory=TinyModelSpec)


@dataclass(kw_only=True)
class SFTConfig(Checked):
    """The short supervised warm-up on the task format, before RL (``rlvr.sft``).

    Attributes:
        enabled: run the warm-up at all.
        max_steps: the most optimizer steps.
        batch_size: prompt/answer pairs per step.
        lr: AdamW learning rate (constant after a 10-step linear warm-up).
        weight_decay: AdamW weight decay.
        eval_every: measure held-out greedy accuracy every this many steps (0 = only at the end).
        target_accuracy: stop as soon as held-out greedy accuracy reaches this, leaving room for
            RL to show; None trains for ``max_steps``.
        eval_tasks: held-out tasks in each warm-up accuracy check.
        check_gate: skip a due check while the training batches' own exact match (the share
            of the last ``eval_every`` batches' rows whose every trained token was the argmax of
            the step's forward, computed for free from its logits) is below ``check_gate x
            target_accuracy``; the last step is always checked. 0 (the default) checks every
            time. The held-out check costs about two training steps, and on the quickstart's
            task it is far from the target for most of the warm-up; a gate well below 1 skips
            those checks and still checks every step where the target can be reached.
        demos: ``answers`` trains on ``prompt -> gold answer`` pairs of fresh training tasks;
            ``scripted`` on a fixed pool of ``num_demos`` multi-turn episodes of the env's
            scripted teacher (``TextEnv.demonstration``, e.g. the tool envs' calculator user;
            ``rlvr.training.demonstrations``).
        num_demos: the size of that pool.
        tool_call_share: the share of the ``scripted`` pool whose teacher uses the env's
            tools, in (0, 1]; the rest answer directly with the gold answer (a model without a
            tool habit). 1.0 (the default): every demonstration uses them.
        mixed_steps: with ``tool_call_share`` < 1, a staged warm-up: first demonstrations that
            all call the tool (up to ``target_accuracy`` of the check, or ``max_steps``), then
            this many steps on the mixed pool (no check). 0 (the default): the mixed pool from
            the start. A model learns to copy the tool's result several times faster when
            every demonstration shows it; the mixed stage then only has to teach it to call
            rarely.
        check: how each accuracy check is measured. ``greedy``: greedy generation on the
            held-out tasks, verified by the env (what evaluation measures). ``exact_match``: one
            teacher-forced forward over the same tasks' gold answers, counting those whose every
            token is the model's argmax, a lower bound of greedy accuracy that costs a forward
            instead of a generation (``demos: answers`` only). ``tool_path``: the same
            teacher-forced count over scripted demonstrations of ``eval_tasks`` held-out
            tasks that all call the tool, leaving out the first model token (the decision to
            call): how reliably the model carries out a call and copies its result, whatever
            share of its samples calls (``demos: scripted`` only). The accuracy before RL is
            always measured by greedy evaluation.
    """

    enabled: bool = False
    max_steps: int = bounded(300, gt=0)
    batch_size: int = bounded(32, gt=0)
    lr: float = bounded(1e-3, gt=0)
    weight_decay: float = bounded(0.0, ge=0)
    eval_every: int = bounded(25, ge=0)
    target_accuracy: float | None = bounded(None, gt=0, le=1)
    eval_tasks: int = bounded(64, gt=0)
    check_gate: float = bounded(0.0, ge=0, le=1)
    demos: Literal["answers", "scripted"] = "answers"
    num_demos: int = bounded(300, gt=0)
    tool_call_share: float = bounded(1.0, gt=0, le=1)
    mixed_steps: int = bounded(0, ge=0)
    check: Literal["greedy", "exact_match", "tool_path"] = "greedy"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.check == "exact_match" and self.demos != "answers":
            raise ConfigError("check: exact_match needs demos: answers (multi-turn "
                              f"demonstrations are checked by greedy play); got {self.demos!r}",
                              key="check")
        if self.check == "tool_path" and self.demos != "scripted":
            raise ConfigError("check: tool_path needs demos: scripted (it replays held-out "
                              f"scripted demonstrations); got {self.demos!r}", key="check")
        if self.tool_call_share != 1.0 and self.demos != "scripted":
            raise ConfigError("tool_call_share applies to demos: scripted only; got demos: "
                              f"{self.demos!r}", key="tool_call_share")
        if self.mixed_steps and self.tool_call_share == 1.0:
            raise ConfigError("mixed_steps needs tool_call_share < 1 (the mixed pool); got "
                              f"tool_call_share {self.tool_call_share}", key="mixed_steps")


@dataclass(kw_only=True)
class EnvConfig:
    """The environment trained on.

    Attributes:
        id: a registered gymnasium id, e.g. ``rlvr/Math-v0``.
        kwargs: keyword arguments for ``gymnasium.make(id, **kwargs)`` during training.
        eval_kwargs: keyword arguments merged over ``kwargs`` for held-out evaluation (e.g. a
            test split).
        imports: modules imported before the env is made, so plugins can register their envs
            (the CLI's ``--import`` adds to this list).

    ``kwargs`` and ``eval_kwargs`` belong to ``id``: an override that names another env
    (``env.id=rlvr/ReasoningGym-v0``) drops the config file's; only the kwargs given on the
    command line with it remain.
    """

    BELONGS_TO: ClassVar[dict[str, str]] = {"kwargs": "id", "eval_kwargs": "id"}

    id: str = "rlvr/Math-v0"
    kwargs: dict[str, Any] = field(default_factory=dict)
    eval_kwargs: dict[str, Any] = field(default_factory=dict)
    imports: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.id:
            raise ConfigError("id must be a registered gymnasium id such as 'rlvr/Math-v0'",
                              key="id")



class _KLTerm(Checked):
    """A KL term's config: its ``estimator`` must be a known KL estimator."""

    estimator: str

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("estimator", self.estimator, KL_ESTIMATORS)


@dataclass(kw_only=True)
class KLRewardConfig(_KLTerm):
    """The KL penalty subtracted from the token rewards (verl's ``use_kl_in_reward``).

    ``token_level_rewards = token_level_scores - coef * kl`` per token, before the advantages.

    Attributes:
        estimator: ``k1`` (verl's ``algorithm.kl_penalty: kl``, the default), ``abs``, ``k2``,
            ``k3`` or their verl aliases (``kl``, ``mse``, ``low_var_kl``), each optionally
            with ``+`` (that value, k2's gradient).
        coef: beta (verl's ``kl_ctrl.kl_coef``); the initial one with the adaptive controller.
        controller: ``fixed`` keeps ``coef``; ``adaptive`` steers it toward ``target``.
        target: the KL the adaptive controller aims for.
        horizon: the adaptive controller's horizon in samples.
    """

    estimator: str = "k1"
    coef: float = bounded(0.001, ge=0)
    controller: Literal["fixed", "adaptive"] = "fixed"
    target: float = bounded(0.1, gt=0)
    horizon: int = bounded(10000, gt=0)


@dataclass(kw_only=True)
class KLLossConfig(_KLTerm):
    """The KL term added to the policy loss (verl's ``actor.use_kl_loss``).

    ``loss += coef * agg(kl)``, aggregated like ``actor.loss_agg``.

    Attributes:
        estimator: ``k3`` (low-variance, verl's ``kl_loss_type: low_var_kl``, the default),
            ``k1``, ``abs``, ``k2`` or their verl aliases, each optionally with ``+``.
        coef: the weight of the term (verl's ``kl_loss_coef``).
    """

    estimator: str = "k3"
    coef: float = bounded(0.001, ge=0)


@dataclass(kw_only=True)
class KLConfig:
    """The KL penalty toward the frozen reference policy (the initial policy).

    Each placement has its own estimator and coefficient: ``reward`` (default k1, as verl's
    in-reward ``kl``) and ``loss`` (default k3, as verl's ``low_var_kl``). Both may be on at
    once (``placement: both``, allowed by verl too); the trainer then logs a NOTICE.

    Attributes:
        placement: ``reward`` subtracts ``reward.coef * kl`` from the token rewards before the
            advantages (PPO/RLHF style); ``loss`` adds ``loss.coef * agg(kl)`` to the policy
            loss (GRPO style); ``both`` does both; ``off`` loads no reference model at all.
        reward: the in-reward penalty's estimator, coefficient and controller.
        loss: the in-loss term's estimator and coefficient.
    """

    #: Keys of the single-placement KL config, and where each one lives now.
    MOVED_KEYS: ClassVar[dict[str, str]] = {
        "estimator": "algorithm.kl.reward.estimator or algorithm.kl.loss.estimator",
        "coef": "algorithm.kl.reward.coef or algorithm.kl.loss.coef",
        "controller": "algorithm.kl.reward.controller",
        "target": "algorithm.kl.reward.target",
        "horizon": "algorithm.kl.reward.horizon",
    }

    placement: Literal["reward", "loss", "both", "off"] = "off"
    reward: KLRewardConfig = field(default_factory=KLRewardConfig)
    loss: KLLossConfig = field(default_factory=KLLossConfig)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.reward.controller == "adaptive" and not self.in_reward:
            raise ConfigError(
                "algorithm.kl.reward.controller='adaptive' needs algorithm.kl.placement "
                f"'reward' or 'both'; got placement={self.placement!r}"
            )

    @property
    def enabled(self) -> bool:
        """Whether a reference model and KL terms are needed."""
        return self.placement != "off"

    @property
    def in_reward(self) -> bool:
        """Whether the KL penalty goes into the token rewards."""
        return self.placement in ("reward", "both")

    @property
    def in_loss(self) -> bool:
        """Whether the KL term goes into the policy loss."""
        return self.placement in ("loss", "both")


@dataclass(kw_only=True)
class AlgorithmConfig:
    """The RL algorithm: how trajectories become advantages.

    The PPO loss itself (clip range, dual clip, loss aggregation, entropy bonus, epochs,
    mini-batches, truncated IS) is configured on ``actor`` (``rlvr.learner.LearnerConfig``).

    Attributes:
        estimator: an advantage estimator registered in ``rlvr.algorithms.advantages`` (``gae``,
        ``grpo``,
            ``drgrpo``, ``rloo``, ``reinforce_pp``, ``reinforce_pp_baseline``, ...). Whether a
            critic is built follows from the registry (``needs_critic``), not from the name.
        gamma: discount factor (GAE, REINFORCE++).
        lam: GAE lambda.
        kl: the KL penalty toward the reference policy.
    """

    estimator: str = "grpo"
    gamma: float = bounded(1.0, ge=0, le=1)
    lam: float = bounded(1.0, ge=0, le=1)
    kl: KLConfig = field(default_factory=KLConfig)

    def __post_init__(self) -> None:
        check_fields(self)
        from rlvr.algorithms.advantages import ADVANTAGE_ESTIMATORS

        check_choice("estimator", self.estimator, ADVANTAGE_ESTIMATORS)


@dataclass(frozen=True, kw_only=True)
class SamplingSection:
    """How the policy samples during training (``rollout.runner.sampling``).

    Each turn's token budget and sampling seed are not keys: the runner gives a turn what its
    limits leave (``rollout.runner.max_tokens_per_turn``, ``max_response_tokens``) and the
    trainer derives each group's seed from ``trainer.seed``, the step and the task. Values are
    checked as ``rlvr.agents.engine.SamplingParams`` checks them.

    Attributes:
        temperature: ``>= 0``; 0 means greedy decoding (see ``rlvr.agents.engine`` for logprobs).
        top_p: nucleus sampling mass in ``(0, 1]``; 1 disables it.
        top_k: keep the ``k`` most likely tokens; ``-1`` disables it, else ``>= 1``.
        stop_token_ids: extra ids that end generation (the engine's eos ids always do); the id
            that matched is included in the completion.
        stop: strings that end generation as soon as the decoded completion contains one; the
            token that completed the match is included (nothing is trimmed).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        params = self.params()  # SamplingParams' checks and messages
        object.__setattr__(self, "stop_token_ids", params.stop_token_ids)
        object.__setattr__(self, "stop", params.stop)

    def params(self) -> SamplingParams:
        """The runner's ``SamplingParams`` (each turn replaces its budget and seed)."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              stop_token_ids=self.stop_token_ids, stop=self.stop)


@dataclass(frozen=True, kw_only=True)
class RunnerSection(RunnerLimits):
    """The episode runner in training (``rollout.runner``): its limits and sampling.

    Attributes:
        sampling: temperature, top_p, top_k and extra stops (``SamplingSection``).
    """

    sampling: SamplingSection = field(default_factory=SamplingSection)

    def runner_config(self, seed: int) -> RunnerConfig:
        """The runner's ``RunnerConfig`` with ``seed`` as its base seed.

        The trainer's stream passes each group's own seed, so the base seed is a default only.
        """
        return RunnerConfig(**self.limits(), sampling=self.sampling.params(), seed=seed)


#: Keys a run sets itself (runtime context): dotted key -> what sets it and what to write instead.
RUNTIME_KEYS: dict[str, str] = {
    "actor.group_size": "is set from rollout.group_size; leave it out of the config",
    "critic.group_size": "is set from rollout.group_size; leave it out of the config",
    "actor.seed": "is set from trainer.seed; leave it out of the config",
    "critic.seed": "is set from trainer.seed; leave it out of the config",
    "actor.kl_loss_coef": "is set from algorithm.kl; use algorithm.kl.placement=loss (or both) "
                          "and algorithm.kl.loss.coef instead",
    "actor.kl_loss_estimator": "is set from algorithm.kl; use algorithm.kl.placement=loss (or "
                               "both) and algorithm.kl.loss.estimator instead",
    "rollout.runner.seed": "is set from trainer.seed (each group's sampling seed derives from "
                           "it, the step and the task); leave it out of the config",
    "rollout.runner.sampling.seed": "is set from trainer.seed (each group's sampling seed "
                                    "derives from it, the step and the task); leave it out of "
                                    "the config",
    "rollout.runner.sampling.max_new_tokens": "is set per turn from "
                                              "rollout.runner.max_tokens_per_turn (and what "
                                              "rollout.runner.max_response_tokens leaves); use "
                                              "those instead",
}


def refuse_runtime_keys(data: Mapping[str, Any]) -> None:
    """Refuse a raw config mapping that writes a key of ``RUNTIME_KEYS``.

    Raises:
        ConfigError: naming the key, what sets it and what to write instead.
    """
    for dotted, why in RUNTIME_KEYS.items():
        node: Any = data
        *sections, name = dotted.split(".")
        for section in sections:
            node = node.get(section) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and name in node:
            raise ConfigError(f"{dotted} {why}", key=dotted)


@dataclass(kw_only=True)
class RolloutConfig(EngineSection):
    """Stage A: which episodes are played each step, and on which engine.

    ``engine``, ``transformers`` and ``sglang`` are ``rlvr.config.engine.EngineSection``'s (the
    same keys ``rlvr eval`` takes at its top level).

    Attributes:
        prompts_per_step: distinct tasks per training step over all ranks; each rank plays
            ``prompts_per_step / world_size`` of them.
        group_size: episodes sampled per task (GRPO's G).
        runner: the episode runner's limits and sampling (``RunnerSection``): turns, tokens
            per turn, response tokens per episode (the max response length), and ``sampling``
            (temperature, top_p, top_k); the trainer derives each group's sampling seed from
            ``trainer.seed``, the step and the task.
        dynamic_sampling: drop groups whose rewards are all equal (no learning signal) and
            sample fresh tasks to refill, DAPO style.
        max_refill_rounds: the most extra sampling rounds per step for ``dynamic_sampling``;
            after that the batch is topped up with dropped groups, so its size stays fixed.
        open_ahead: open the next step's episodes (make or reuse the env, ``reset``, render the
            prompt) on a background thread while this step trains (``EpisodeRunner.open_ahead``):
            the same episodes, their Python beside the update's compute instead of in front of
            the next rollout. Envs are then reset one update early; false keeps them in step.
        max_logprob_diff: the sync guard: the run stops when a step's ``rollout/logprob_diff``
            (engine vs learner logprobs, token mean) exceeds it; null picks the default for the
            engine's dtype (``rlvr.training.sync_guard``), ``.inf`` disables it.
        max_staleness: asynchronous RL (docs/async.md): 0 (the default) plays each step's
            episodes with the weights of the step before, then trains (synchronous). ``k >= 1``:
            a producer thread plays up to ``k`` steps ahead on the engine's own copy of the
            weights while the learner trains; rows with a token more than ``k`` policy versions
            old are dropped, and the update is decoupled PPO (needs ``actor.tis_cap``). One
            rank.
        inflight_update: with ``max_staleness >= 1``, what the producer does when the learner
            publishes new weights while episodes are mid-generation (docs/async.md): ``off``
            (the default) loads them before the next step's episodes only; ``continue`` swaps
            them into the engine between two decode steps, keeping the KV cache (later tokens
            carry the new version); ``abort`` drops the running generations and regenerates
            them under the new weights.
    """

    prompts_per_step: int = bounded(8, gt=0)
    group_size: int = bounded(8, gt=0)
    runner: RunnerSection = field(default_factory=RunnerSection)
    dynamic_sampling: bool = False
    max_refill_rounds: int = bounded(3, ge=0)
    open_ahead: bool = True
    max_logprob_diff: float | None = None
    max_staleness: int = bounded(0, ge=0)
    inflight_update: Literal["off", "continue", "abort"] = "off"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.inflight_update != "off" and not self.max_staleness:
            raise ConfigError(f"inflight_update {self.inflight_update!r} updates weights while "
                              f"the asynchronous producer plays: it needs max_staleness >= 1 "
                              f"(got 0); allowed without it: 'off'", key="inflight_update")
        if self.max_logprob_diff is not None and not self.max_logprob_diff > 0:  # .inf is allowed
            raise ConfigError(f"max_logprob_diff must be > 0 or null (the default for the "
                              f"engine's dtype); got {self.max_logprob_diff!r}",
                              key="max_logprob_diff")

    @property
    def episodes_per_step(self) -> int:
        """``prompts_per_step * group_size``: the global batch in sequences."""
        return self.prompts_per_step * self.group_size


@dataclass(kw_only=True)
class HeldOutConfig:
    """Held-out evaluation during training (``rlvr.eval.evaluator.Evaluator``).

    Attributes:
        suite: a suite name (``configs/suites``) or YAML path; null builds one from ``env``:
            the same id and kwargs merged with ``env.eval_kwargs``, ``tasks`` tasks of the test
            split.
        every: evaluate every this many RL steps (0 = only before and after RL).
        tasks: held-out tasks when ``suite`` is null.
        samples: episodes per task (greedy when 1).
        max_new_tokens: generation budget per turn.
        show_episodes: write ``episodes.html`` at the end with this many held-out episodes
            before and after RL (0 = none).
    """

    suite: str | None = None
    every: int = bounded(0, ge=0)
    tasks: int = bounded(200, gt=0)
    samples: int = bounded(1, gt=0)
    max_new_tokens: int = bounded(32, gt=0)
    show_episodes: int = bounded(0, ge=0)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(kw_only=True)
class TrainerConfig(Checked):
    """The run itself: length, seed, outputs, checkpoints.

    Attributes:
        steps: RL training steps.
        seed: seeds the task stream, sampling, mini-batch shuffles and the warm-up.
        output_dir: where metrics, checkpoints and the exported model go.
        checkpoint_every: save a checkpoint every this many steps (0 = never).
        keep_checkpoints: how many most recent checkpoints to keep.
        resume: continue from the latest complete checkpoint in ``output_dir``; the config must
            match the checkpoint's except for keys that can change on a resume (run length,
            outputs, logging; ``rlvr.training.run_dir``). Without a checkpoint in a used folder
            the run refuses.
        overwrite: a fresh run (``resume: false``) in an ``output_dir`` that holds another run's
            files deletes them first; without it such a run refuses to start.
        max_failed_steps: stop the run when this many RL steps in a row had no valid episode
            (every episode ended in an env error or timeout), naming the env and its first
            error with the traceback.
        export_at_end: write a HuggingFace model directory to ``output_dir/export`` at the end.
        loggers: where each step's metrics go (``rlvr.tracking``): ``jsonl``
            (``metrics.jsonl``, always written, listed or not), ``tensorboard``
            (``tensorboard/``), ``mlflow`` (``pip install 'rlvr[mlflow]'``; ``MLFLOW_TRACKING_URI``,
            else a store in ``output_dir/mlflow.db``), ``wandb`` (``pip install 'rlvr[wandb]'``;
            offline in ``output_dir/wandb/`` unless W&B is configured; ``WANDB_MODE``,
            ``WANDB_DIR``) or a plugin's (``rlvr.tracking.register_logger``, imported through
            ``env.imports``). Only rank 0 logs; a logger that fails is reported once and
            disabled, training goes on.
        tensorboard: false leaves ``tensorboard`` out of ``loggers``.
        plot: write ``curves.png`` (reward and accuracy) at the end.
        progress: show progress bars.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        threads: ``torch.set_num_threads`` for this process; null keeps torch's default (one per
            core). Importing rlvr before torch makes OpenMP's idle threads sleep instead of
            spin (``OMP_WAIT_POLICY=PASSIVE`` unless set), which keeps 2 threads from
            collapsing next to another busy process but wakes the sleeping thread for every
            op; whether two threads then beat one depends on the machine (the quickstart's
            config says what was measured where).
    """

    steps: int = bounded(100, gt=0)
    seed: int = bounded(0, ge=0)
    output_dir: str = "runs/default"
    checkpoint_every: int = bounded(0, ge=0)
    keep_checkpoints: int = bounded(2, gt=0)
    resume: bool = False
    overwrite: bool = False
    max_failed_steps: int = bounded(1, gt=0)
    export_at_end: bool = True
    loggers: tuple[str, ...] = ("jsonl", "tensorboard")
    tensorboard: bool = True
    plot: bool = True
    progress: bool = True
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = bounded(None, gt=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.loggers = tuple(self.loggers)
        if not all(isinstance(name, str) for name in self.loggers):
            raise ConfigError(f"loggers must be a list of logger names; got {self.loggers!r}",
                              key="loggers")
        from rlvr.tracking import check_loggers

        check_loggers(self.active_loggers(), key="loggers")

    def active_loggers(self) -> list[str]:
        """``loggers`` as they run: ``jsonl`` first, ``tensorboard`` only with ``tensorboard``."""
        names = ["jsonl", *self.loggers]
        return [n for n in dict.fromkeys(names) if n != "tensorboard" or self.tensorboard]


def _section_of(value: Any, section: type[Any], runtime: Any, owner: str) -> Any:
    """``value`` as its user ``section`` (``ActorSection`` for ``actor``).

    A learner's runtime config given from Python (``ActorConfig``) keeps its section's fields;
    its runtime fields must be at their defaults (``runtime``'s), as a file cannot set them.

    Raises:
        ConfigError: a runtime field was set (names the key and what sets it).
    """
    if type(value) is section or not isinstance(value, section):
        return value
    for f in dataclasses.fields(value):
        if f.name not in section.__dataclass_fields__ and \
                getattr(value, f.name) != getattr(runtime, f.name):
            key = f"{owner}.{f.name}"
            raise ConfigError(f"{key} {RUNTIME_KEYS[key]}", key=key)
    return section(**_fields_of(value, section))


def _check_mini_batch(owner: str, learner: LearnerSection, rollout: RolloutConfig) -> None:
    """``<owner>.mini_batch_size`` counts prompts (verl's unit) and must divide the step's.

    A value that would only make sense as a count of sequences (the old unit) is rejected with a
    message that says so and gives the number of prompts it meant.
    """
    mini, prompts, group = learner.mini_batch_size, rollout.prompts_per_step, rollout.group_size
    if not mini or prompts % mini == 0:
        return
    message = (
        f"{owner}.mini_batch_size ({mini}) counts prompts, like verl's ppo_mini_batch_size (each "
        f"prompt brings its rollout.group_size={group} sequences); it must divide "
        f"rollout.prompts_per_step ({prompts})"
    )
    if group > 1 and mini % group == 0 and (prompts * group) % mini == 0:
        message += (
            f". If {mini} was meant as sequences, write {owner}.mini_batch_size={mini // group} "
            "(prompts)"
        )
    raise ConfigError(message, key=f"{owner}.mini_batch_size")


@dataclass(kw_only=True)
class TrainConfig:
    """Everything ``rlvr train`` needs, one field per component.

    Attributes:
        model: the model trained (a local HF directory or the tiny built-in one).
        sft: the optional supervised warm-up on the task format.
        env: the environment trained on.
        rollout: stage A, episode generation.
        algorithm: the advantage estimator and the KL penalty.
        actor: the policy's learner (``rlvr.learner.ActorConfig``): optimizer, micro-batches
            (sequences per rank), mini-batches (PROMPTS over all ranks, as verl's
            ``ppo_mini_batch_size``; ``group_size`` comes from ``rollout.group_size``), epochs,
            PPO clip/dual clip, loss aggregation, entropy bonus, truncated IS (``tis_cap``).
            Its KL-loss fields are set from ``algorithm.kl``; a decaying ``optim.schedule``
            without ``total_steps`` decays over ``trainer.steps`` (``defaults_from``).
        critic: the critic's learner (``rlvr.learner.CriticConfig``: optimizer, micro-batches,
            mini-batches in prompts like the actor's, ``value_clip``; no policy-loss keys). Used
            only by estimators that need values, such as ``gae``; with the others it is checked
            like any section but no critic is built.
        eval: held-out evaluation during training.
        trainer: run length, seed, outputs and checkpoints.
        teacher: on-policy distillation from a frozen teacher
        (``rlvr.algorithms.distill.TeacherConfig``:
            ``path``, ``coef``, ``verifier_coef``); off while ``path`` is null.
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    actor: ActorSection = field(default_factory=ActorSection)
    critic: CriticSection = field(default_factory=CriticSection)
    eval: HeldOutConfig = field(default_factory=HeldOutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)

    def __post_init__(self) -> None:
        self.actor = _section_of(self.actor, ActorSection, ActorConfig(), "actor")
        self.critic = _section_of(self.critic, CriticSection, CriticConfig(), "critic")
        check_fields(self)
        for owner in ("actor", "critic"):
            _check_mini_batch(owner, getattr(self, owner), self.rollout)
        if self.rollout.max_staleness and self.actor.tis_cap is None:
            raise ConfigError(
                "actor.tis_cap must be set (e.g. 2.0) when rollout.max_staleness >= 1 (got "
                f"{self.rollout.max_staleness}): asynchronous RL trains with decoupled PPO, whose "
                "behaviour-policy weights min(pi_old / pi_rollout, tis_cap) need a cap",
                key="actor.tis_cap")

    @classmethod
    def import_plugins_from(cls, data: Mapping[str, Any]) -> None:
        """Import the modules in the raw mapping's ``env.imports`` before anything is checked.

        A plugin may register an env, an advantage estimator or a policy loss that the config
        names; importing it first lets ``algorithm.estimator: my_estimator`` validate, whatever
        the path that loads the config (``load_config``, ``from_dict``, the CLI).

        Raises:
            ConfigError: ``env.imports`` is not a list of module names, or one fails to import
                (the message names the module and the error).
        """
        env = data.get("env")
        modules = env.get("imports") if isinstance(env, Mapping) else None
        if modules is None:
            return
        if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) for m in modules):
            raise ConfigError(f"env.imports: expected a list of module names; got {modules!r}",
                              key="env.imports")
        from rlvr.envs.errors import PluginImportError
        from rlvr.envs.registration import import_plugins

        try:
            import_plugins(modules)
        except PluginImportError as err:
            raise ConfigError(f"env.imports: {err}", key="env.imports") from err

    @classmethod
    def defaults_from(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The raw mapping being loaded, with the run length filled in where it is meant.

        A decaying ``actor``/``critic`` ``optim.schedule`` without ``total_steps`` decays over
        ``trainer.steps``. A key the run sets itself (``RUNTIME_KEYS``) is refused first.
        """
        refuse_runtime_keys(data)
        trainer = data.get("trainer")
        steps = trainer.get("steps") if isinstance(trainer, Mapping) else None
        steps = TrainerConfig.steps if steps is None else steps
        if not isinstance(steps, int) or isinstance(steps, bool):  # before the learners' keys
            raise ConfigError(f"trainer.steps: expected an integer; got {steps!r}",
                              key="trainer.steps")
        steps = max(steps, 1)  # trainer.steps < 1 is reported by TrainerConfig, naming the field
        for owner in ("actor", "critic"):
            learner = data.get(owner)
            optim = learner.get("optim") if isinstance(learner, Mapping) else None
            if isinstance(optim, Mapping) and optim.get("schedule", "constant") != "constant" \
                    and optim.get("total_steps") is None:
                data = merge(data, {owner: {"optim": {"total_steps": steps}}})
        return data

    def runner_config(self) -> RunnerConfig:
        """The episode runner's config as the trainer builds it (base seed ``trainer.seed``)."""
        return self.rollout.runner.runner_config(seed=self.trainer.seed)

    def learner_configs(self) -> tuple[ActorConfig, CriticConfig]:
        """The actor's and critic's learner configs as the learner gets them.

        ``seed`` comes from ``trainer.seed``, ``group_size`` (the unit of ``mini_batch_size``)
        from ``rollout.group_size``, the actor's KL-loss fields from ``algorithm.kl.loss``
        (placement ``loss`` or ``both``) and an unset ``loss_scale_factor`` from
        ``rollout.runner.max_response_tokens``.
        """
        kl = self.algorithm.kl
        common: dict[str, Any] = {"seed": self.trainer.seed, "group_size": self.rollout.group_size}
        kl_loss: dict[str, Any] = {"kl_loss_coef": kl.loss.coef,
                                   "kl_loss_estimator": kl.loss.estimator} if kl.in_loss else {}
        actor = ActorConfig(**_fields_of(self.actor, ActorSection), **common, **kl_loss)
        critic = CriticConfig(**_fields_of(self.critic, CriticSection), **common)
        # Dr. GRPO's constant normaliser defaults to the configured maximum response length.
        longest = float(self.rollout.runner.max_response_tokens)
        if actor.loss_scale_factor is None:
            actor = dataclasses.replace(actor, loss_scale_factor=longest)
        if critic.loss_scale_factor is None:
            critic = dataclasses.replace(critic, loss_scale_factor=longest)
        return actor, critic


def _fields_of(section: Any, cls: type[Any]) -> dict[str, Any]:
    """The values of ``cls``'s fields on ``section`` (a user section, by name)."""
    return {f.name: getattr(section, f.name) for f in dataclasses.fields(cls)}


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Load a ``TrainConfig`` from a YAML file and dotted ``key=value`` overrides.

    Raises:
        ConfigError: the file is missing or not a mapping, or any key/value is invalid (the
            message names the key as typed, the allowed keys or values, and close matches).
    """
    return typing.cast(TrainConfig, load(TrainConfig, path, overrides))
