"""The typed configuration of ``rlvr train``: one dataclass per component, loaded from YAML.

A YAML file in ``configs/`` only fills these objects; nothing else reads it. Dotted
``key=value`` overrides (``algorithm.kl.placement=loss``) are applied on top, and every key and
value is checked before any work starts: an unknown key fails with the keys allowed at that level
and close-match suggestions, a value of the wrong type names the key and the expected type, and
each component's ``__post_init__`` checks ranges and names the field.

Component configs owned by other modules are composed, not copied: ``model.tiny`` is
``rlvr.tiny.TinyModelSpec``, ``actor``/``critic`` are ``rlvr.learner.LearnerConfig`` and
``rollout.runner`` is ``agents.RunnerConfig`` (with its ``sampling: SamplingParams``).

Example::

    cfg = load_config("configs/quickstart.yaml", ["trainer.steps=20", "actor.optim.lr=1e-4"])
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from agents.engines import ENGINES
from agents.runner import RunnerConfig
from agents.sglang.options import SGLangOptions
from rlvr.errors import ConfigError
from rlvr.kl import KL_CONTROLLERS
from rlvr.learner.config import LearnerConfig, OptimConfig
from rlvr.tiny import TinyModelSpec


def _positive(owner: str, **values: float | int) -> None:
    """Raise ``ConfigError`` naming the first field of ``owner`` that is not > 0."""
    for name, value in values.items():
        if value <= 0:
            raise ConfigError(f"{owner}.{name} must be > 0; got {value!r}")


def _non_negative(owner: str, **values: float | int) -> None:
    """Raise ``ConfigError`` naming the first field of ``owner`` that is < 0."""
    for name, value in values.items():
        if value < 0:
            raise ConfigError(f"{owner}.{name} must be >= 0; got {value!r}")


# ---------------------------------------------------------------------------- components
@dataclass(kw_only=True)
class ModelConfig:
    """Which causal LM to train.

    Attributes:
        path: a local HuggingFace model directory (any causal LM with a chat template). When
            None, the tiny Qwen2 model described by ``tiny`` is built locally (no download).
        tiny: the shape of the locally built tiny model; used only when ``path`` is None.
    """

    path: str | None = None
    tiny: TinyModelSpec = field(default_factory=TinyModelSpec)


@dataclass(kw_only=True)
class SFTConfig:
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
        demos: ``answers`` trains on ``prompt -> gold answer`` pairs of fresh training tasks;
            ``calculator`` on a fixed pool of ``num_demos`` multi-turn episodes of a scripted
            calculator user (``rlvr.training.demonstrations``; tool envs only).
        num_demos: the size of that pool.
        check: how each accuracy check is measured. ``greedy``: greedy generation on the
            held-out tasks, verified by the env (what evaluation measures). ``exact_match``: one
            teacher-forced forward over the same tasks' gold answers, counting those whose every
            token is the model's argmax, a lower bound of greedy accuracy that costs a forward
            instead of a generation (``demos: answers`` only). The accuracy before RL is always
            measured by greedy evaluation.
    """

    enabled: bool = False
    max_steps: int = 300
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    eval_every: int = 25
    target_accuracy: float | None = None
    eval_tasks: int = 64
    demos: Literal["answers", "calculator"] = "answers"
    num_demos: int = 300
    check: Literal["greedy", "exact_match"] = "greedy"

    def __post_init__(self) -> None:
        if self.check == "exact_match" and self.demos != "answers":
            raise ConfigError("sft.check: exact_match needs sft.demos: answers (multi-turn "
                              f"demonstrations are checked by greedy play); got {self.demos!r}")
        _positive("sft", max_steps=self.max_steps, batch_size=self.batch_size, lr=self.lr,
                  eval_tasks=self.eval_tasks, num_demos=self.num_demos)
        _non_negative("sft", eval_every=self.eval_every, weight_decay=self.weight_decay)
        if self.target_accuracy is not None and not 0.0 < self.target_accuracy <= 1.0:
            raise ConfigError(
                f"sft.target_accuracy must be in (0, 1] or null; got {self.target_accuracy!r}"
            )


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
    """

    id: str = "rlvr/Math-v0"
    kwargs: dict[str, Any] = field(default_factory=dict)
    eval_kwargs: dict[str, Any] = field(default_factory=dict)
    imports: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.id:
            raise ConfigError("env.id must be a registered gymnasium id such as 'rlvr/Math-v0'")


KL_PLACEMENTS: tuple[str, ...] = ("reward", "loss", "both", "off")


def _check_kl_estimator(key: str, value: str) -> None:
    from rlvr.learner.config import KL_ESTIMATORS

    if value not in KL_ESTIMATORS:
        raise ConfigError(_unknown_message(key, value, KL_ESTIMATORS))


@dataclass(kw_only=True)
class KLRewardConfig:
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
    coef: float = 0.001
    controller: Literal["fixed", "adaptive"] = "fixed"
    target: float = 0.1
    horizon: int = 10000

    def __post_init__(self) -> None:
        _check_kl_estimator("algorithm.kl.reward.estimator", self.estimator)
        if self.controller not in KL_CONTROLLERS:
            raise ConfigError(
                _unknown_message("algorithm.kl.reward.controller", self.controller, KL_CONTROLLERS)
            )
        _non_negative("algorithm.kl.reward", coef=self.coef)
        _positive("algorithm.kl.reward", target=self.target, horizon=self.horizon)


@dataclass(kw_only=True)
class KLLossConfig:
    """The KL term added to the policy loss (verl's ``actor.use_kl_loss``).

    ``loss += coef * agg(kl)``, aggregated like ``actor.loss_agg``.

    Attributes:
        estimator: ``k3`` (low-variance, verl's ``kl_loss_type: low_var_kl``, the default),
            ``k1``, ``abs``, ``k2`` or their verl aliases, each optionally with ``+``.
        coef: the weight of the term (verl's ``kl_loss_coef``).
    """

    estimator: str = "k3"
    coef: float = 0.001

    def __post_init__(self) -> None:
        _check_kl_estimator("algorithm.kl.loss.estimator", self.estimator)
        _non_negative("algorithm.kl.loss", coef=self.coef)


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
        if self.placement not in KL_PLACEMENTS:
            raise ConfigError(
                _unknown_message("algorithm.kl.placement", self.placement, KL_PLACEMENTS)
            )
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
        estimator: an advantage estimator registered in ``rlvr.advantages`` (``gae``, ``grpo``,
            ``drgrpo``, ``rloo``, ``reinforce_pp``, ``reinforce_pp_baseline``, ...). Whether a
            critic is built follows from the registry (``needs_critic``), not from the name.
        gamma: discount factor (GAE, REINFORCE++).
        lam: GAE lambda.
        kl: the KL penalty toward the reference policy.
    """

    estimator: str = "grpo"
    gamma: float = 1.0
    lam: float = 1.0
    kl: KLConfig = field(default_factory=KLConfig)

    def __post_init__(self) -> None:
        for name in ("gamma", "lam"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"algorithm.{name} must be in [0, 1]; got {value!r}")
        from rlvr.advantages import ADVANTAGE_ESTIMATORS

        if self.estimator not in ADVANTAGE_ESTIMATORS:
            raise ConfigError(
                _unknown_message("algorithm.estimator", self.estimator, ADVANTAGE_ESTIMATORS)
            )


@dataclass(kw_only=True)
class RolloutConfig:
    """Stage A: which episodes are played each step, and on which engine.

    Attributes:
        engine: ``transformers`` (in-process; with one rank it shares the actor's weights) or
            ``sglang`` (a server; weights pushed after each step).
        prompts_per_step: distinct tasks per training step over all ranks; each rank plays
            ``prompts_per_step / world_size`` of them.
        group_size: episodes sampled per task (GRPO's G).
        runner: the episode runner's limits and sampling (``agents.RunnerConfig``): turns,
            tokens per turn, response tokens per episode (the max response length), and
            ``sampling`` (temperature, top_p, top_k). Its ``seed`` is not used: the trainer
            derives each group's sampling seed from ``trainer.seed``, the step and the task.
        dynamic_sampling: drop groups whose rewards are all equal (no learning signal) and
            sample fresh tasks to refill, DAPO style.
        max_refill_rounds: the most extra sampling rounds per step for ``dynamic_sampling``;
            after that the batch is topped up with dropped groups, so its size stays fixed.
        sglang: the SGLang engine's options (``agents.sglang.SGLangOptions``): ``url`` to
            attach to (null launches a server on the policy), ``weight_sync`` (``distributed``
            or ``disk``), ``bucket_mb``, ``python`` (the server's venv), ``launch_args``, ...
        max_logprob_diff: the sync guard: the run stops when a step's ``rollout/logprob_diff``
            (engine vs learner logprobs, token mean) exceeds it; null picks the default for the
            engine's dtype (``rlvr.training.sync_guard``), ``.inf`` disables it.
    """

    engine: str = "transformers"
    prompts_per_step: int = 8
    group_size: int = 8
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    dynamic_sampling: bool = False
    max_refill_rounds: int = 3
    sglang: SGLangOptions = field(default_factory=SGLangOptions)
    max_logprob_diff: float | None = None

    def __post_init__(self) -> None:
        _positive("rollout", prompts_per_step=self.prompts_per_step, group_size=self.group_size)
        _non_negative("rollout", max_refill_rounds=self.max_refill_rounds)
        if self.engine not in ENGINES:
            raise ConfigError(_unknown_message("rollout.engine", self.engine, ENGINES))
        if self.max_logprob_diff is not None and not self.max_logprob_diff > 0:
            raise ConfigError(f"rollout.max_logprob_diff must be > 0 or null (the default for "
                              f"the engine's dtype); got {self.max_logprob_diff!r}")

    @property
    def episodes_per_step(self) -> int:
        """``prompts_per_step * group_size``: the global batch in sequences."""
        return self.prompts_per_step * self.group_size


@dataclass(kw_only=True)
class HeldOutConfig:
    """Held-out evaluation during training (``rlvr.evaluate.Evaluator``).

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
    every: int = 0
    tasks: int = 200
    samples: int = 1
    max_new_tokens: int = 32
    show_episodes: int = 0

    def __post_init__(self) -> None:
        _non_negative("eval", every=self.every, show_episodes=self.show_episodes)
        _positive("eval", tasks=self.tasks, samples=self.samples,
                  max_new_tokens=self.max_new_tokens)


@dataclass(kw_only=True)
class TrainerConfig:
    """The run itself: length, seed, outputs, checkpoints.

    Attributes:
        steps: RL training steps.
        seed: seeds the task stream, sampling, mini-batch shuffles and the warm-up; it also
            overrides ``actor.seed`` and ``critic.seed``.
        output_dir: where metrics, checkpoints and the exported model go.
        checkpoint_every: save a checkpoint every this many steps (0 = never).
        keep_checkpoints: how many most recent checkpoints to keep.
        resume: continue from the latest complete checkpoint in ``output_dir`` if there is one.
        export_at_end: write a HuggingFace model directory to ``output_dir/export`` at the end.
        tensorboard: also write TensorBoard event files.
        plot: write ``curves.png`` (reward and accuracy) at the end.
        progress: show progress bars.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        threads: ``torch.set_num_threads`` for this process; null keeps torch's default (one per
            core). Tiny models run faster on one: their matrices are too small to split.
    """

    steps: int = 100
    seed: int = 0
    output_dir: str = "runs/default"
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    export_at_end: bool = True
    tensorboard: bool = True
    plot: bool = True
    progress: bool = True
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = None

    def __post_init__(self) -> None:
        _positive("trainer", steps=self.steps, keep_checkpoints=self.keep_checkpoints)
        if self.threads is not None:
            _positive("trainer", threads=self.threads)
        _non_negative("trainer", checkpoint_every=self.checkpoint_every, seed=self.seed)


def _check_mini_batch(owner: str, learner: LearnerConfig, rollout: RolloutConfig) -> None:
    """``<owner>.mini_batch_size`` counts prompts (verl's unit) and must divide the step's.

    A value that would only make sense as a count of sequences (the old unit) is rejected with a
    message that says so and gives the number of prompts it meant.
    """
    if learner.group_size != 1:
        raise ConfigError(
            f"{owner}.group_size is set from rollout.group_size; leave it out of the config"
        )
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
    raise ConfigError(message)


def _critic_default() -> LearnerConfig:
    return LearnerConfig(optim=OptimConfig(lr=1e-5))


@dataclass(kw_only=True)
class TrainConfig:
    """Everything ``rlvr train`` needs, one field per component.

    Attributes:
        model: the model trained (a local HF directory or the tiny built-in one).
        sft: the optional supervised warm-up on the task format.
        env: the environment trained on.
        rollout: stage A, episode generation.
        algorithm: the advantage estimator and the KL penalty.
        actor: the policy's learner (``rlvr.learner.LearnerConfig``): optimizer, micro-batches
            (sequences per rank), mini-batches (PROMPTS over all ranks, as verl's
            ``ppo_mini_batch_size``; ``group_size`` comes from ``rollout.group_size``), epochs,
            PPO clip/dual clip, loss aggregation, entropy bonus, truncated IS (``tis_cap``).
            Its KL-loss fields are set from ``algorithm.kl``; a
            decaying ``optim.schedule`` without ``total_steps`` decays over ``trainer.steps``
            (when loaded with ``load_config``).
        critic: the critic's learner config (optimizer, micro-batches, mini-batches in
            prompts like the actor's, ``value_clip``); used only by estimators that need values,
            such as ``gae``.
        eval: held-out evaluation during training.
        trainer: run length, seed, outputs and checkpoints.
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    actor: LearnerConfig = field(default_factory=LearnerConfig)
    critic: LearnerConfig = field(default_factory=_critic_default)
    eval: HeldOutConfig = field(default_factory=HeldOutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def __post_init__(self) -> None:
        for owner in ("actor", "critic"):
            _check_mini_batch(owner, getattr(self, owner), self.rollout)
        if self.actor.kl_loss_coef != 0.0:
            raise ConfigError(
                "actor.kl_loss_coef is set from algorithm.kl; use algorithm.kl.placement=loss "
                "(or both) and algorithm.kl.loss.coef instead"
            )

    def learner_configs(self) -> tuple[LearnerConfig, LearnerConfig]:
        """The actor's and critic's learner configs as the learner gets them.

        ``seed`` comes from ``trainer.seed``, ``group_size`` (the unit of ``mini_batch_size``)
        from ``rollout.group_size``, the actor's KL-loss fields from ``algorithm.kl.loss``
        (placement ``loss`` or ``both``) and an unset ``loss_scale_factor`` from
        ``rollout.runner.max_response_tokens``.
        """
        kl = self.algorithm.kl
        common: dict[str, Any] = {"seed": self.trainer.seed, "group_size": self.rollout.group_size}
        actor = dataclasses.replace(self.actor, **common)
        if kl.in_loss:
            actor = dataclasses.replace(actor, kl_loss_coef=kl.loss.coef,
                                        kl_loss_estimator=kl.loss.estimator)
        critic = dataclasses.replace(self.critic, **common)
        # Dr. GRPO's constant normaliser defaults to the configured maximum response length.
        longest = float(self.rollout.runner.max_response_tokens)
        actor, critic = (
            c if c.loss_scale_factor is not None
            else dataclasses.replace(c, loss_scale_factor=longest)
            for c in (actor, critic)
        )
        return actor, critic


# ---------------------------------------------------------------------------- loading
def _unknown_message(key: str, value: object, allowed: Sequence[str] | Mapping[str, Any]) -> str:
    """``"<key>: unknown value ...; allowed: ...; did you mean ...?"``."""
    names = sorted(allowed)
    message = f"{key}: unknown value {value!r}; allowed: {', '.join(names)}"
    close = difflib.get_close_matches(str(value), names, n=3)
    if close:
        message += f". Did you mean {' or '.join(repr(c) for c in close)}?"
    return message


def _type_name(tp: Any) -> str:
    """A readable name for a type annotation."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp`` (converting where lossless) or raise."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(_unknown_message(key, value, [str(a) for a in allowed]))
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            with contextlib.suppress(ConfigError):
                return _coerce(value, arg, key)
        raise ConfigError(f"{key}: expected {_type_name(tp)}; got {value!r}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping of {tp.__name__} fields; got {value!r}")
        return from_dict(tp, value, prefix=key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false; got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer; got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)  # YAML 1.1 reads "1e-3" as a string
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number; got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string; got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list; got {value!r}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{key}: expected {len(args)} items; got {value!r}")
            return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        items = [_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping; got {value!r}")
        return dict(value)
    return value


def from_dict(cls: type[Any], data: Mapping[str, Any], *, prefix: str = "") -> Any:
    """Build the dataclass ``cls`` from a (nested) mapping, checking every key and value.

    Args:
        cls: a dataclass type; nested dataclass fields are built recursively.
        data: field values; missing fields keep their defaults.
        prefix: the dotted path of ``cls`` inside the whole config, used in messages.

    Returns:
        The instance (its ``__post_init__`` has run).

    Raises:
        ConfigError: an unknown key (the message lists the allowed keys and close matches), a
            value of the wrong type, or a value a component rejects.
    """
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            message = f"unknown config key {dotted!r}; allowed keys here: {', '.join(names)}"
            moved = getattr(cls, "MOVED_KEYS", {}).get(key)
            if moved:
                raise ConfigError(f"{message}. {dotted!r} moved: use {moved}")
            close = difflib.get_close_matches(str(key), names, n=3)
            if close:
                message += f". Did you mean {' or '.join(repr(c) for c in close)}?"
            raise ConfigError(message)
        kwargs[key] = _coerce(value, hints[key], dotted)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as err:
        if isinstance(err, ConfigError) and (not prefix or str(err).startswith(prefix)):
            raise
        where = f" in {prefix!r}" if prefix else ""
        raise ConfigError(f"invalid config{where}: {err}") from err


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """Turn ``["a.b=1", "c=x"]`` into ``{"a": {"b": 1}, "c": "x"}`` (values parsed as YAML).

    Raises:
        ConfigError: an item without ``=`` or with an empty key.
    """
    tree: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip() or any(not p for p in key.strip().split(".")):
            raise ConfigError(f"override {item!r} must look like dotted.key=value")
        value = yaml.safe_load(raw) if raw.strip() else ""
        node = tree
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r} sets a key under {part!r}, a plain value")
            node = child
        node[parts[-1]] = value
    return tree


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``extra`` over ``base`` (mappings merge, anything else replaces)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_config(
    path: str | Path | None = None, overrides: Sequence[str] = (), *, cls: type[Any] = TrainConfig
) -> Any:
    """Load a YAML config and apply dotted ``key=value`` overrides.

    Args:
        path: a YAML file (a mapping of component names to their fields); None = all defaults.
        overrides: ``dotted.key=value`` strings, values parsed as YAML scalars/lists.
        cls: the config class to build.

    Returns:
        The validated config object.

    Raises:
        ConfigError: the file is missing or not a mapping, or any key/value is invalid.
    """
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"config file {str(p)!r} is not valid YAML: {err}") from err
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
        data = dict(loaded)
    data = merge(data, parse_overrides(overrides))
    if cls is TrainConfig:
        data = _default_total_steps(data)
    return from_dict(cls, data)


def _default_total_steps(data: dict[str, Any]) -> dict[str, Any]:
    """Let a decaying ``actor``/``critic`` schedule without ``total_steps`` use trainer.steps."""
    trainer = data.get("trainer")
    steps = trainer.get("steps") if isinstance(trainer, Mapping) else None
    steps = TrainerConfig.steps if steps is None else steps
    if not isinstance(steps, int) or isinstance(steps, bool):
        return data  # from_dict reports trainer.steps
    steps = max(steps, 1)  # trainer.steps < 1 is reported by TrainerConfig, naming the field
    for owner in ("actor", "critic"):
        learner = data.get(owner)
        optim = learner.get("optim") if isinstance(learner, Mapping) else None
        if isinstance(optim, Mapping) and optim.get("schedule", "constant") != "constant" \
                and optim.get("total_steps") is None:
            data = merge(data, {owner: {"optim": {"total_steps": steps}}})
    return data


def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain YAML-able data (round-trips through ``from_dict``)."""
    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        return value

    return plain(config)


def dump_config(config: Any, path: str | Path) -> None:
    """Write ``config`` as YAML to ``path``."""
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
