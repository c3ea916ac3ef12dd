"""Typed configuration of the learner: the optimizer and how each role's model is trained.

``OptimConfig`` describes AdamW and its learning-rate schedule. ``LearnerSection`` holds what
every sharded model uses (micro-batching, mini-batches, epochs, mixed precision, activation
checkpointing, loss aggregation); the frozen reference model takes the actor's. Each trained
role adds only the fields it reads: ``ActorSection`` the policy loss (PPO clip, dual clip,
entropy bonus, truncated IS, sequence packing) and ``CriticSection`` the value clip, so a key
that means nothing for a role (``critic.clip_low``) is an unknown key, not ignored.

The ``*Section`` classes are what a user writes (``actor:`` and ``critic:`` of a training
config). The learner runs with ``LearnerConfig``, ``ActorConfig`` and ``CriticConfig``: the same
fields plus the runtime context a run sets and a user never writes (``seed``, ``group_size``,
the actor's KL-loss term; ``rlvr.config.TrainConfig.learner_configs`` fills them in).
Fields are checked with ``rlvr.config_checks`` on construction; a bad value raises
``rlvr.errors.ConfigError`` (a ``ValueError``) naming the field and the allowed values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlvr.algorithms.kl import KL_KINDS
from rlvr.algorithms.losses import POLICY_LOSSES
from rlvr.config_checks import Checked, bounded, check_choice, check_fields
from rlvr.errors import ConfigError
from rlvr.learner.lora import LoraConfig

Schedule = Literal["constant", "cosine", "linear"]
MixedPrecision = Literal["auto", "bf16", "fp32"]
FsdpMode = Literal["auto", "always"]
LossAgg = Literal[
    "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
]
KL_ESTIMATORS: tuple[str, ...] = tuple(KL_KINDS) + tuple(k + "+" for k in KL_KINDS)


@dataclass(kw_only=True)
class OptimConfig:
    """AdamW with a linear warm-up and a constant, cosine or linear schedule.

    The schedule advances once per ``update()`` call (one training step), not per mini-batch.

    Attributes:
        lr: peak learning rate (> 0).
        weight_decay: AdamW decoupled weight decay (>= 0).
        betas: AdamW betas, each in [0, 1).
        eps: AdamW epsilon (> 0).
        warmup_steps: training steps of linear warm-up from ``lr / (warmup_steps + 1)`` to
            ``lr`` (0 = none).
        schedule: after warm-up: ``constant`` keeps ``lr``; ``cosine`` and ``linear`` decay to
            ``min_lr_ratio * lr`` at ``total_steps``.
        total_steps: training steps of the whole run; required by ``cosine`` and ``linear``.
        min_lr_ratio: the floor of the decaying schedules, as a fraction of ``lr``, in [0, 1].
        grad_clip: clip the global gradient L2 norm to this (0 = no clipping; the norm is
            still logged).
    """

    lr: float = bounded(1e-6, gt=0)
    weight_decay: float = bounded(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = bounded(1e-8, gt=0)
    warmup_steps: int = bounded(0, ge=0)
    schedule: Schedule = "constant"
    total_steps: int | None = bounded(None, ge=1)
    min_lr_ratio: float = bounded(0.0, ge=0, le=1)
    grad_clip: float = bounded(1.0, ge=0)

    def __post_init__(self) -> None:
        check_fields(self)
        if len(self.betas) != 2 or not all(
            isinstance(b, (int, float)) and 0.0 <= b < 1.0 for b in self.betas
        ):
            raise ConfigError(f"betas must be two numbers in [0, 1); got {self.betas!r}",
                              key="betas")
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        if self.schedule != "constant" and self.total_steps is None:
            raise ConfigError(
                f"total_steps must be set (an integer >= 1) when schedule is "
                f"{self.schedule!r}; allowed without it: 'constant'", key="total_steps"
            )


@dataclass(kw_only=True)
class LearnerSection(Checked):
    """What every sharded model (actor, critic, frozen reference) is run and trained with.

    Attributes:
        optim: the optimizer (not used by the frozen reference model).
        micro_batch_size: sequences per forward/backward on each rank (verl's
            ``ppo_micro_batch_size_per_gpu``); gradients accumulate over the micro-batches of a
            mini-batch.
        max_tokens_per_micro_batch: when set, a token budget per micro-batch (verl's dynamic
            batch size): consecutive rows join a micro-batch while its cost stays within the
            budget (rows x padded width, or the real tokens with ``sequence_packing``; a row
            over the budget goes alone), at most ``micro_batch_size`` rows. Ranks agree on the
            number of micro-batches (the largest), so their collectives match. None = by rows.
        accumulate_unsharded_grads: skip the gradient reduce-scatter on all but the last
            micro-batch of a mini-batch (FSDP2's ``set_requires_gradient_sync(False)``): less
            communication, but every rank then holds the UNSHARDED float32 gradient (4 bytes x
            all parameters; +28 GB per GPU at 7B). Off by default (each micro-batch's gradient
            is reduce-scattered into the shards, as verl does); for small models only.
        mini_batch_size: PROMPTS per optimizer step over ALL ranks, as verl's
            ``ppo_mini_batch_size``: each prompt brings its ``group_size`` sampled sequences, so
            an optimizer step trains on ``mini_batch_size * group_size`` sequences
            (``mini_batch_sequences``), which must be a multiple of the world size; each rank
            trains on that many divided by the world size of its local rows per step. None =
            the whole batch (one optimizer step per epoch).
        epochs: passes over each training step's batch (PPO's K).
        mixed_precision: ``auto`` = bf16 compute (fp32 master weights and gradient reduction)
            on GPU, fp32 on CPU; ``bf16`` or ``fp32`` force it.
        activation_checkpointing: recompute each decoder layer's activations in the backward
            pass (less memory, about a third more compute).
        fsdp: ``auto`` shards with FSDP2 when there are several ranks or bf16 compute (its
            mixed-precision policy does the casting); a single rank in fp32 runs the plain
            module, which computes the same numbers without FSDP2's per-layer hooks (on the CPU
            quickstart ~18% less time per update, ~10% per rollout). ``always`` shards a single
            fp32 rank too.
        loss_agg: how per-token losses (policy or value) become a scalar (see
            docs/algorithms.md).
        loss_scale_factor: the constant divisor of ``seq-mean-token-sum-norm`` (Dr. GRPO;
            verl's ``loss_scale_factor``), > 0. It must not depend on a batch's padded width,
            which changes from step to step and rank to rank. None: ``rlvr train`` sets it to
            ``rollout.runner.max_response_tokens``; a learner built directly with that mode
            and None raises ``ConfigError``. Ignored by the other modes.
    """

    optim: OptimConfig = field(default_factory=OptimConfig)
    micro_batch_size: int = bounded(8, ge=1)
    max_tokens_per_micro_batch: int | None = bounded(None, ge=1)
    accumulate_unsharded_grads: bool = False
    mini_batch_size: int | None = bounded(None, ge=1)
    epochs: int = bounded(1, ge=1)
    mixed_precision: MixedPrecision = "auto"
    activation_checkpointing: bool = False
    fsdp: FsdpMode = "auto"
    loss_agg: LossAgg = "token-mean"
    loss_scale_factor: float | None = bounded(None, gt=0)


@dataclass(kw_only=True)
class LearnerConfig(LearnerSection):
    """A learner as it runs: its section plus the run's context (never written by a user).

    Attributes:
        group_size: sequences per prompt in the batches this learner trains on (the unit of
            ``mini_batch_size``). A training run sets it from ``rollout.group_size``; 1 (the
            default) for batches without groups, where a prompt is a sequence.
        seed: seeds the mini-batch shuffles (combined with the update counter, so a resumed
            run shuffles exactly as an uninterrupted one). A training run sets it from
            ``trainer.seed``.
    """

    group_size: int = bounded(1, ge=1)
    seed: int = bounded(0, ge=0)

    @property
    def mini_batch_sequences(self) -> int | None:
        """Sequences per optimizer step over all ranks: ``mini_batch_size * group_size``."""
        return None if self.mini_batch_size is None else self.mini_batch_size * self.group_size


@dataclass(kw_only=True)
class ActorSection(LearnerSection):
    """The policy's learner (``actor:``): ``LearnerSection`` plus the policy loss.

    Attributes:
        sequence_packing: run the policy's micro-batches as one packed row of their real
            tokens (padding removed, position ids restarted per sequence) where the model's
            attention supports it (``rlvr.learner.logprobs.packing_supported``), else dense.
            Same logprobs and losses either way. The critic always runs dense.
        policy_loss: the policy loss, a name registered in ``rlvr.algorithms.losses.POLICY_LOSSES``
            (``vanilla``: PPO's clipped surrogate); a new loss is registered there with
            ``@register_policy_loss``.
        clip_low: PPO ratio clip below 1 (``1 - clip_low``), in (0, 1).
        clip_high: PPO ratio clip above 1 (``1 + clip_high``), > 0; above ``clip_low`` is
            DAPO's clip-higher.
        dual_clip: dual-clip constant c (> 1) for negative advantages; None turns it off.
        entropy_coef: weight of the entropy bonus (>= 0; 0 = off, entropy is still logged).
        tis_cap: when set (> 0), multiply the per-token policy loss by truncated
            importance-sampling weights ``min(exp(old_logp - rollout_logp), tis_cap)``; None
            = off.
        lora: train a LoRA adapter instead of the whole model (``rank``, ``alpha``,
            ``target_modules``; ``rlvr.learner.lora``); the reference policy is then the base
            with the adapter switched off. None = full fine-tuning.
    """

    sequence_packing: bool = False
    policy_loss: str = "vanilla"
    clip_low: float = bounded(0.2, gt=0, lt=1)
    clip_high: float = bounded(0.2, gt=0)
    dual_clip: float | None = bounded(3.0, gt=1)
    entropy_coef: float = bounded(0.0, ge=0)
    tis_cap: float | None = bounded(None, gt=0)
    lora: LoraConfig | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("policy_loss", self.policy_loss, tuple(POLICY_LOSSES))


@dataclass(kw_only=True)
class ActorConfig(ActorSection, LearnerConfig):
    """The policy's learner as it runs: ``ActorSection``, the run's context and the KL loss.

    Attributes:
        kl_loss_coef: weight of the KL-to-reference loss term (>= 0; 0 = off). When > 0 the
            batch must carry ``ref_logprobs``. A training run sets it from
            ``algorithm.kl.loss`` (placement ``loss`` or ``both``).
        kl_loss_estimator: the KL estimator of the loss term, a ``rlvr.algorithms.kl.kl_penalty``
            kind: ``k1``/``kl``, ``abs``, ``k2``/``mse``, ``k3``/``low_var_kl``, each optionally
            with a trailing ``+`` (that value, k2's gradient).
    """

    kl_loss_coef: float = bounded(0.0, ge=0)
    kl_loss_estimator: str = "k3"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("kl_loss_estimator", self.kl_loss_estimator, KL_ESTIMATORS)


@dataclass(kw_only=True)
class CriticSection(LearnerSection):
    """The value model's learner (``critic:``): ``LearnerSection`` plus the value loss's clip.

    Its optimizer defaults to a higher learning rate than the policy's (1e-5).

    Attributes:
        value_clip: clip range of the critic's value loss (> 0).
    """

    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    value_clip: float = bounded(0.5, gt=0)


@dataclass(kw_only=True)
class CriticConfig(CriticSection, LearnerConfig):
    """The value model's learner as it runs: ``CriticSection`` and the run's context."""


@dataclass(kw_only=True)
class TeacherConfig(Checked):
    """On-policy distillation from a frozen teacher (``teacher:`` in a training config).

    Attributes:
        path: a local HF causal-LM directory with the student's tokenizer; null (the default)
            turns distillation off. Loaded like the reference model: frozen, sharded, bf16
            under bf16 compute.
        coef: the weight of the per-token reverse-KL reward in each token's advantage.
        verifier_coef: the weight of the verifier's reward (its advantage from
            ``algorithm.estimator``) added to it; 0 (the default) is pure distillation.
    """

    path: str | None = None
    coef: float = bounded(1.0, gt=0)
    verifier_coef: float = bounded(0.0, ge=0)

    @property
    def enabled(self) -> bool:
        """Whether a teacher is loaded and its signal used."""
        return self.path is not None


__all__ = [
    "KL_ESTIMATORS",
    "ActorConfig",
    "ActorSection",
    "CriticConfig",
    "CriticSection",
    "LearnerConfig",
    "LearnerSection",
    "OptimConfig",
    "TeacherConfig",
]
