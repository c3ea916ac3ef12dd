"""AdamW and its learning-rate schedule (linear warm-up, then constant, cosine or linear decay).

The schedule is a picklable callable object inside ``torch.optim.lr_scheduler.LambdaLR``, so the
scheduler's ``state_dict`` round-trips through checkpoints exactly. It is stepped once per
training step (one ``update()`` call), not per mini-batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypedDict

import torch
from torch.optim.lr_scheduler import LambdaLR

from rlvr.learner.config import OptimConfig


class WarmupSchedule:
    """The learning-rate multiplier after ``step`` completed training steps.

    - warm-up (``step < warmup_steps``): ``(step + 1) / (warmup_steps + 1)``;
    - then ``constant``: 1; ``cosine``: ``m + (1 - m) * (1 + cos(pi * p)) / 2``; ``linear``:
      ``m + (1 - m) * (1 - p)``, with ``m = min_lr_ratio`` and ``p`` the fraction of the
      post-warm-up steps done, clamped to [0, 1].
    """

    def __init__(self, config: OptimConfig) -> None:
        self.warmup_steps = config.warmup_steps
        self.schedule = config.schedule
        self.total_steps = config.total_steps or 0
        self.min_lr_ratio = config.min_lr_ratio

    def __call__(self, step: int) -> float:
        """The multiplier of the peak learning rate for training step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return (step + 1) / (self.warmup_steps + 1)
        if self.schedule == "constant":
            return 1.0
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, max(0.0, (step - self.warmup_steps) / span))
        m = self.min_lr_ratio
        if self.schedule == "cosine":
            return m + (1.0 - m) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return m + (1.0 - m) * (1.0 - progress)


class AdamWKernel(TypedDict, total=False):
    """``torch.optim.AdamW``'s implementation keyword: one of ``fused`` and ``foreach``."""

    fused: bool
    foreach: bool


def adamw_kernel(params: Sequence[torch.Tensor]) -> AdamWKernel:
    """The fastest ``torch.optim.AdamW`` implementation for ``params``, as its keyword.

    ``{"fused": True}`` (one kernel for the whole update) when every parameter lives on one CPU
    or CUDA device, plain tensors or FSDP2's DTensors (their local shards are updated, as
    torchtitan's default does); ``{"foreach": True}`` (one multi-tensor kernel per op)
    otherwise. torch's default on CPU is neither but a loop over the parameters: on the
    quickstart's model (50 tensors, 0.84 M values) a step takes 12.4 ms looped, 8.6 ms foreach
    and 3.0 ms fused. The fused update is the same arithmetic up to float rounding.
    """
    devices = {p.device for p in params}
    if len(devices) == 1 and next(iter(devices)).type in ("cpu", "cuda"):
        return {"fused": True}
    return {"foreach": True}


def build_optimizer(
    params: Iterable[torch.nn.Parameter], config: OptimConfig
) -> tuple[torch.optim.AdamW, LambdaLR]:
    """AdamW over ``params`` (those with ``requires_grad``) and its ``LambdaLR`` schedule.

    Returns:
        ``(optimizer, scheduler)``; the optimizer's learning rate already holds step 0's value.
    """
    trainable = [p for p in params if p.requires_grad]
    optimizer = torch.optim.AdamW(
        trainable,
        lr=config.lr,
        betas=config.betas,
        eps=config.eps,
        weight_decay=config.weight_decay,
        **adamw_kernel(trainable),
    )
    scheduler = LambdaLR(optimizer, WarmupSchedule(config))
    return optimizer, scheduler


__all__ = ["AdamWKernel", "WarmupSchedule", "adamw_kernel", "build_optimizer"]
