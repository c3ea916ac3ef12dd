"""Typed configuration of the learner: the optimizer and how one model is trained.

``OptimConfig`` describes AdamW and its learning-rate schedule; ``LearnerConfig`` describes one
trained (or frozen) model: micro-batching, mixed precision, activation checkpointing and the PPO
loss options. The trainer builds one ``LearnerConfig`` for the actor and one for the critic (the
critic ignores the policy-loss fields). Every field is checked in ``__post_init__``; a bad value
raises ``rlvr.errors.ConfigError`` (a ``ValueError``) naming the field and the allowed values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from rlvr.aggregate import AGG_MODES
from rlvr.errors import ConfigError
from rlvr.kl import KL_KINDS
from rlvr.losses import POLICY_LOSSES

Schedule = Literal["constant", "cosine", "linear"]
MixedPrecision = Literal["auto", "bf16", "fp32"]
LossAgg = Literal[
    "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
]
SCHEDULES: tuple[str, ...] = ("constant", "cosine", "linear")
MIXED_PRECISIONS: tuple[str, ...] = ("auto", "bf16", "fp32")
LOSS_AGGS: tuple[str, ...] = AGG_MODES
KL_ESTIMATORS: tuple[str, ...] = tuple(KL_KINDS) + tuple(k + "+" for k in KL_KINDS)


def _check_finite(owner: str, name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{owner}.{name} must be a finite number; got {value!r}")


def _check_min(owner: str, name: str, value: float, low: float, *, strict: bool) -> None:
    _check_finite(owner, name, value)
    if value < low or (strict and value == low):
        op = ">" if strict else ">="
        raise ConfigError(f"{owner}.{name} must be {op} {low}; got {value!r}")


def _check_int(owner: str, name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{owner}.{name} must be an integer >= {low}; got {value!r}")


def _check_choice(owner: str, name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(
            f"{owner}.{name} must be one of {', '.join(repr(a) for a in allowed)}; got {value!r}"
        )


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

    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup_steps: int = 0
    schedule: Schedule = "constant"
    total_steps: int | None = None
    min_lr_ratio: float = 0.0
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        owner = "optim"
        _check_min(owner, "lr", self.lr, 0.0, strict=True)
        _check_min(owner, "weight_decay", self.weight_decay, 0.0, strict=False)
        _check_min(owner, "eps", self.eps, 0.0, strict=True)
        _check_min(owner, "grad_clip", self.grad_clip, 0.0, strict=False)
        if len(self.betas) != 2 or not all(
            isinstance(b, (int, float)) and 0.0 <= b < 1.0 for b in self.betas
        ):
            raise ConfigError(f"optim.betas must be two numbers in [0, 1); got {self.betas!r}")
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        _check_int(owner, "warmup_steps", self.warmup_steps, 0)
        _check_choice(owner, "schedule", self.schedule, SCHEDULES)
        if self.total_steps is not None:
            _check_int(owner, "total_steps", self.total_steps, 1)
        if self.schedule != "constant" and self.total_steps is None:
            raise ConfigError(
                f"optim.total_steps must be set (an integer >= 1) when optim.schedule is "
                f"{self.schedule!r}; allowed without it: 'constant'"
            )
        _check_min(owner, "min_lr_ratio", self.min_lr_ratio, 0.0, strict=False)
        if self.min_lr_ratio > 1.0:
            raise ConfigError(f"optim.min_lr_ratio must be in [0, 1]; got {self.min_lr_ratio!r}")


@dataclass(kw_only=True)
class LearnerConfig:
    """How one model (actor, critic or reference) is sharded, run and trained.

    Attributes:
        optim: the optimizer (ignored by the frozen reference model).
        micro_batch_size: sequences per forward/backward on each rank (verl's
            ``ppo_micro_batch_size_per_gpu``); gradients accumulate over the micro-batches of a
            mini-batch.
        max_tokens_per_micro_batch: when set, a token budget per micro-batch (verl's dynamic
            batch size): consecutive rows join a micro-batch while its cost stays within the
            budget (rows x padded width, or the real tokens with ``sequence_packing``; a row
            over the budget goes alone), at most ``micro_batch_size`` rows. Ranks agree on the
            number of micro-batches (the largest), so their collectives match. None = by rows.
        sequence_packing: run the policy's micro-batches as one packed row of their real
            tokens (padding removed, position ids restarted per sequence) where the model's
            attention supports it (``rlvr.learner.logprobs.packing_supported``), else dense.
            Same logprobs and losses either way. The critic always runs dense.
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
        group_size: sequences per prompt in the batches this learner trains on (the unit of
            ``mini_batch_size``). The trainer sets it from ``rollout.group_size``; 1 (the
            default) for batches without groups, where a prompt is a sequence.
        epochs: passes over each training step's batch (PPO's K).
        mixed_precision: ``auto`` = bf16 compute (fp32 master weights and gradient reduction)
            on GPU, fp32 on CPU; ``bf16`` or ``fp32`` force it.
        activation_checkpointing: recompute each decoder layer's activations in the backward
            pass (less memory, about a third more compute).
        policy_loss: the policy loss, a name registered in ``rlvr.losses.POLICY_LOSSES``
            (``vanilla``: PPO's clipped surrogate); a new loss is registered there with
            ``@register_policy_loss``.
        clip_low: PPO ratio clip below 1 (``1 - clip_low``), in (0, 1).
        clip_high: PPO ratio clip above 1 (``1 + clip_high``), > 0; above ``clip_low`` is
            DAPO's clip-higher.
        dual_clip: dual-clip constant c (> 1) for negative advantages; None turns it off.
        loss_agg: how per-token losses become a scalar (see reference/algorithms.md).
        loss_scale_factor: the constant divisor of ``seq-mean-token-sum-norm`` (Dr. GRPO;
            verl's ``loss_scale_factor``), > 0. It must not depend on a batch's padded width,
            which changes from step to step and rank to rank. None: ``rlvr train`` sets it to
            ``rollout.runner.max_response_tokens``; a learner built directly with that mode
            and None raises ``ConfigError``. Ignored by the other modes.
        entropy_coef: weight of the entropy bonus (>= 0; 0 = off, entropy is still logged).
        kl_loss_coef: weight of the KL-to-reference loss term (>= 0; 0 = off). When > 0 the
            batch must carry ``ref_logprobs``.
        kl_loss_estimator: the KL estimator of the loss term, a ``rlvr.kl.kl_penalty``
            kind: ``k1``/``kl``, ``abs``, ``k2``/``mse``, ``k3``/``low_var_kl``, each optionally
            with a trailing ``+`` (that value, k2's gradient).
        tis_cap: when set (> 0), multiply the per-token policy loss by truncated
            importance-sampling weights ``min(exp(old_logp - rollout_logp), tis_cap)``; None
            = off.
        value_clip: clip range of the critic's value loss (> 0).
        seed: seeds the mini-batch shuffles (combined with the update counter, so a resumed
            run shuffles exactly as an uninterrupted one).
    """

    optim: OptimConfig = field(default_factory=OptimConfig)
    micro_batch_size: int = 8
    max_tokens_per_micro_batch: int | None = None
    sequence_packing: bool = False
    accumulate_unsharded_grads: bool = False
    mini_batch_size: int | None = None
    group_size: int = 1
    epochs: int = 1
    mixed_precision: MixedPrecision = "auto"
    activation_checkpointing: bool = False
    policy_loss: str = "vanilla"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = 3.0
    loss_agg: LossAgg = "token-mean"
    loss_scale_factor: float | None = None
    entropy_coef: float = 0.0
    kl_loss_coef: float = 0.0
    kl_loss_estimator: str = "k3"
    tis_cap: float | None = None
    value_clip: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        owner = "learner"
        if not isinstance(self.optim, OptimConfig):
            raise ConfigError(f"learner.optim must be an OptimConfig; got {self.optim!r}")
        _check_int(owner, "micro_batch_size", self.micro_batch_size, 1)
        if self.max_tokens_per_micro_batch is not None:
            _check_int(owner, "max_tokens_per_micro_batch", self.max_tokens_per_micro_batch, 1)
        for flag in ("sequence_packing", "accumulate_unsharded_grads"):
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise ConfigError(f"learner.{flag} must be true or false; got {value!r}")
        if self.mini_batch_size is not None:
            _check_int(owner, "mini_batch_size", self.mini_batch_size, 1)
        _check_int(owner, "group_size", self.group_size, 1)
        _check_int(owner, "epochs", self.epochs, 1)
        _check_choice(owner, "mixed_precision", self.mixed_precision, MIXED_PRECISIONS)
        if not isinstance(self.activation_checkpointing, bool):
            raise ConfigError(
                f"learner.activation_checkpointing must be true or false; "
                f"got {self.activation_checkpointing!r}"
            )
        _check_choice(owner, "policy_loss", self.policy_loss, tuple(POLICY_LOSSES))
        _check_min(owner, "clip_low", self.clip_low, 0.0, strict=True)
        if self.clip_low >= 1.0:
            raise ConfigError(f"learner.clip_low must be in (0, 1); got {self.clip_low!r}")
        _check_min(owner, "clip_high", self.clip_high, 0.0, strict=True)
        if self.dual_clip is not None:
            _check_min(owner, "dual_clip", self.dual_clip, 1.0, strict=True)
        _check_choice(owner, "loss_agg", self.loss_agg, LOSS_AGGS)
        if self.loss_scale_factor is not None:
            _check_min(owner, "loss_scale_factor", self.loss_scale_factor, 0.0, strict=True)
        _check_min(owner, "entropy_coef", self.entropy_coef, 0.0, strict=False)
        _check_min(owner, "kl_loss_coef", self.kl_loss_coef, 0.0, strict=False)
        _check_choice(owner, "kl_loss_estimator", self.kl_loss_estimator, KL_ESTIMATORS)
        if self.tis_cap is not None:
            _check_min(owner, "tis_cap", self.tis_cap, 0.0, strict=True)
        _check_min(owner, "value_clip", self.value_clip, 0.0, strict=True)
        _check_int(owner, "seed", self.seed, 0)

    @property
    def mini_batch_sequences(self) -> int | None:
        """Sequences per optimizer step over all ranks: ``mini_batch_size * group_size``."""
        return None if self.mini_batch_size is None else self.mini_batch_size * self.group_size


__all__ = ["KL_ESTIMATORS", "LOSS_AGGS", "LearnerConfig", "OptimConfig"]
