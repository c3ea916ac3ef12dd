"""Advantage estimators: one registry of functions over one input type (``AdvantageInputs``).

Every per-token tensor is ``(batch, response_len)`` and ``response_mask`` is 1 on tokens the
model generated (trained on), 0 on env/tool tokens and padding. The numbers follow verl 0.9.1
``core_algos`` (docs/algorithms.md) to 1e-5 in float32; on 300 random batches
the largest difference from verl 0.9.1 itself was 3.3e-6 (grpo), 0 for gae and reinforce_pp:

- ``gae``: Generalized Advantage Estimation, https://arxiv.org/abs/1506.02438 (needs a critic).
- ``grpo``: group-relative outcome advantage of DeepSeekMath, https://arxiv.org/abs/2402.03300.
- ``drgrpo``: GRPO without the std division (Dr. GRPO), https://arxiv.org/abs/2503.20783.
- ``rloo``: REINFORCE leave-one-out, https://arxiv.org/abs/2402.14740.
- ``reinforce_pp`` / ``reinforce_pp_baseline``: REINFORCE++, https://arxiv.org/abs/2501.03262.

Each estimator is one function ``fn(x: AdvantageInputs) -> (advantages, returns)``,
registered by name with ``@register_estimator``. The trainer never branches on names:
``compute_advantages(name, AdvantageInputs(rewards, mask, values=..., group_ids=..., ...))``
calls the registered estimator, and ``get_estimator(name).needs_critic`` (or
``estimator_needs_critic(name)``) says whether a critic must produce ``values``.

Multi-turn masks: where ``response_mask`` is 0 *inside* a response (env tokens), GAE carries
``nextvalue`` and the running advantage through unchanged and REINFORCE++ carries its running
return through unchanged (no discounting across env tokens); rewards and values written on
masked tokens are ignored by these two. The outcome estimators (grpo, drgrpo, rloo,
reinforce_pp_baseline) score a response as the sum of ``token_level_rewards`` over all its
positions, as verl does (the collator writes 0 on padding).

Error rows: ``valid`` (``(B,)`` bool, ``RolloutBatch.valid``) is False on rows whose episode
ended in an env/sandbox error. Estimators read ``AdvantageInputs.mask``, the response mask with
those rows zeroed (so GAE's and REINFORCE++'s whitening never see them), the group estimators
leave them out of their group's size, mean and std, and their advantages and returns are 0.
Example: scores [1, 1, 1, error] give [0, 0, 0, 0] (three equal valid scores), not
[0.5, 0.5, 0.5, -1.5] as a wrong answer would. A group whose valid rows number one follows the
group-of-one rule of each estimator; a group with none gives 0.

Deviations from verl, on purpose:

- Whitening needs two valid tokens (``masked_var`` raises otherwise, as verl's does). The
  estimators that whiten (gae, reinforce_pp, reinforce_pp_baseline) instead return all-zero
  advantages when the batch has fewer than two valid tokens (nothing to normalise against; the
  batch then gives no policy gradient), where verl raises. GAE ``returns`` are unaffected.
- Group statistics are computed in float64 and vectorised (verl loops in Python, float32), so a
  group whose scores are all equal gets exactly 0, and row order never matters.
- Estimators run under ``torch.no_grad`` and return detached tensors.
- ``group_ids`` may be a list of any hashables, a numpy array or an integer tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
import torch

from rlvr.algorithms.masked import check_same_shape, masked_whiten
from rlvr.algorithms.registry import Registry
from rlvr.errors import ConfigError, ShapeError

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageEstimatorFn",
    "AdvantageInputs",
    "Estimator",
    "GroupIds",
    "compute_advantages",
    "compute_drgrpo",
    "compute_gae",
    "compute_grpo",
    "compute_reinforce_pp",
    "compute_reinforce_pp_baseline",
    "compute_rloo",
    "estimator_needs_critic",
    "get_estimator",
    "group_index",
    "register_estimator",
    "unregister_estimator",
]

#: Group ids of the rows: a list of hashables (one per row), a numpy array or an int tensor.
GroupIds = Sequence[Hashable] | np.ndarray | torch.Tensor


# ---------------------------------------------------------------------------- the input type
@dataclass(frozen=True)
class AdvantageInputs:
    """What every estimator reads: the batch tensors and the estimator parameters.

    Attributes:
        token_level_rewards: ``(B, R)`` rewards (scores minus any in-reward KL).
        response_mask: ``(B, R)``, 1 on model tokens.
        values: ``(B, R)`` critic values (estimators with ``needs_critic``), else None.
        group_ids: one id per row (estimators with ``needs_groups``; rows from the same prompt
            share one), else None.
        valid: ``(B,)`` bool, False on env-error rows: their mask is zeroed (``mask``) and the
            group estimators leave them out of group statistics. None = all valid.
        gamma: discount in [0, 1] (gae, reinforce_pp).
        lam: GAE lambda in [0, 1].
        norm_by_std: divide by the group std (grpo).
        eps: added to the group std (grpo, drgrpo).

    Raises:
        ShapeError: the per-token tensors are not all 2-D of one shape, or ``valid`` is not
            ``(B,)``.
        ConfigError: ``gamma`` or ``lam`` is outside [0, 1].
    """

    token_level_rewards: torch.Tensor
    response_mask: torch.Tensor
    values: torch.Tensor | None = None
    group_ids: GroupIds | None = None
    valid: torch.Tensor | None = None
    gamma: float = 1.0
    lam: float = 1.0
    norm_by_std: bool = True
    eps: float = 1e-6

    def __post_init__(self) -> None:
        shape = check_same_shape(
            token_level_rewards=self.token_level_rewards,
            response_mask=self.response_mask,
            values=self.values,
        )
        if len(shape) != 2:
            raise ShapeError(
                f"token_level_rewards must be (batch, response_len); got shape {shape}"
            )
        if self.valid is not None and tuple(self.valid.shape) != (shape[0],):
            raise ShapeError(f"valid has shape {tuple(self.valid.shape)}; expected ({shape[0]},)")
        for name in ("gamma", "lam"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1]; got {value}")

    @cached_property
    def mask(self) -> torch.Tensor:
        """``response_mask`` with the rows whose ``valid`` is False zeroed (same dtype)."""
        if self.valid is None:
            return self.response_mask
        keep = self.valid.bool().to(self.response_mask.device)
        return self.response_mask * keep[:, None].to(self.response_mask.dtype)

    def need_values(self, estimator: str) -> torch.Tensor:
        """``values``, or ``ConfigError`` naming the ``estimator`` that needs them."""
        return _need(self.values, "values (from a critic)", estimator)

    def need_groups(self, estimator: str) -> GroupIds:
        """``group_ids``, or ``ConfigError`` naming the ``estimator`` that needs them."""
        return _need(self.group_ids, "group_ids", estimator)


def _need(value: Any, what: str, name: str) -> Any:
    """Return ``value``; raise ``ConfigError`` if the estimator ``name`` got None for it."""
    if value is None:
        raise ConfigError(f"advantage estimator {name!r} needs {what}; got None")
    return value


def _whiten_or_zero(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``masked_whiten``, but all zeros when fewer than two tokens are valid (see module doc)."""
    if float(mask.sum()) < 2:
        return torch.zeros_like(values)
    return masked_whiten(values, mask)


# ---------------------------------------------------------------------------- group statistics
def group_index(group_ids: GroupIds, batch_size: int) -> tuple[torch.Tensor, int]:
    """Map group ids to dense codes ``0..G-1`` in order of first appearance.

    Args:
        group_ids: one id per row: a list of hashables, a numpy array or an int tensor.
        batch_size: the expected number of rows ``B``.

    Returns:
        ``(codes, G)``: ``codes`` is a ``(B,)`` int64 CPU tensor, ``G`` the number of groups.

    Raises:
        ShapeError: ``len(group_ids) != batch_size``.
    """
    if isinstance(group_ids, torch.Tensor):
        ids: list[Any] = group_ids.reshape(-1).tolist()
    elif isinstance(group_ids, np.ndarray):
        ids = group_ids.reshape(-1).tolist()
    else:
        ids = list(group_ids)
    if len(ids) != batch_size:
        raise ShapeError(f"group_ids has {len(ids)} entries; expected one per row ({batch_size})")
    first_seen: dict[Any, int] = {}
    codes = [first_seen.setdefault(g, len(first_seen)) for g in ids]
    return torch.tensor(codes, dtype=torch.long), len(first_seen)


def _group_stats(
    scores: torch.Tensor, group_ids: GroupIds, valid: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group size, group mean and unbiased group std over the valid rows, in float64.

    Args:
        scores: ``(B,)`` one score per row.
        group_ids: one id per row.
        valid: ``(B,)`` bool; rows with False are left out of every statistic (their own
            score is never read). None = all rows valid.

    Returns:
        ``(size, mean, std)``, each ``(B,)`` float64 on ``scores.device``: the number of valid
        rows of the row's group, their mean (0 when none) and unbiased std (0 for fewer than
        two).
    """
    codes, n_groups = group_index(group_ids, scores.shape[0])
    codes = codes.to(scores.device)
    s = scores.to(torch.float64)
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=s.device)
    if valid is None:
        w = torch.ones_like(s)
    else:
        keep = valid.bool().to(s.device)
        s = torch.where(keep, s, torch.zeros_like(s))
        w = keep.to(torch.float64)
    size = zeros.index_add(0, codes, w)
    mean = zeros.index_add(0, codes, s) / size.clamp(min=1)
    dev = (s - mean[codes]) * w
    var = zeros.index_add(0, codes, dev * dev) / (size - 1).clamp(min=1)
    return size[codes], mean[codes], var.sqrt()[codes]


def _per_token(adv: torch.Tensor, x: AdvantageInputs) -> torch.Tensor:
    """``(B,)`` float64 row advantages, invalid rows set to 0, broadcast over ``x.mask``."""
    if x.valid is not None:
        adv = torch.where(x.valid.to(adv.device), adv, torch.zeros_like(adv))
    dtype = x.token_level_rewards.dtype
    return adv.to(dtype)[:, None] * x.mask.to(dtype)


# ---------------------------------------------------------------------------- the registry
#: An estimator: ``(advantages, returns)``, each ``(B, R)`` and detached.
AdvantageEstimatorFn = Callable[[AdvantageInputs], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Estimator:
    """A registered advantage estimator.

    Attributes:
        name: the registry key (what configs say).
        fn: the estimator.
        needs_critic: it reads ``values``, so the trainer must run a critic.
        needs_groups: it reads ``group_ids`` (several samples per prompt).
        paper: a link to the method's paper.
    """

    name: str
    fn: AdvantageEstimatorFn
    needs_critic: bool = False
    needs_groups: bool = False
    paper: str = ""


#: name -> Estimator. Changed only through register_estimator / unregister_estimator.
ADVANTAGE_ESTIMATORS: Registry[Estimator] = Registry("advantage estimator")


def register_estimator(
    name: str, *, needs_critic: bool = False, needs_groups: bool = False, paper: str = ""
) -> Callable[[AdvantageEstimatorFn], AdvantageEstimatorFn]:
    """Decorator: register an ``AdvantageEstimatorFn`` under ``name`` (returned unchanged).

    Raises:
        DuplicateNameError: ``name`` is already registered (unregister it first).
    """

    def decorator(fn: AdvantageEstimatorFn) -> AdvantageEstimatorFn:
        ADVANTAGE_ESTIMATORS.add(name, Estimator(name, fn, needs_critic, needs_groups, paper))
        return fn

    return decorator


def unregister_estimator(name: str) -> Estimator:
    """Remove and return the estimator ``name`` (tests use it to restore the registry)."""
    return ADVANTAGE_ESTIMATORS.remove(name)


def get_estimator(name: str) -> Estimator:
    """The registered estimator ``name``.

    Raises:
        UnknownNameError: not registered; the message lists the names and close matches.
    """
    return ADVANTAGE_ESTIMATORS[name]


def estimator_needs_critic(name: str) -> bool:
    """Whether the estimator ``name`` reads critic ``values``."""
    return get_estimator(name).needs_critic


def compute_advantages(name: str, x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the registered estimator ``name`` on ``x``.

    Returns:
        ``(advantages, returns)``, each ``(B, R)``, detached.

    Raises:
        UnknownNameError: ``name`` is not registered.
        ConfigError: the estimator needs ``values`` or ``group_ids`` and got None.
    """
    entry = get_estimator(name)
    if entry.needs_critic:
        x.need_values(name)
    if entry.needs_groups:
        x.need_groups(name)
    return entry.fn(x)


# ---------------------------------------------------------------------------- estimators
@register_estimator("gae", needs_critic=True, paper="https://arxiv.org/abs/1506.02438")
def compute_gae(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (https://arxiv.org/abs/1506.02438), verl semantics.

    Reverse over t: ``delta = r[t] + gamma * nextvalue - v[t]``,
    ``lastgaelam = delta + gamma * lam * lastgaelam``; where ``mask[t] == 0`` both
    ``nextvalue`` and ``lastgaelam`` carry through unchanged. The value after the last valid
    token is 0. Reads ``token_level_rewards``, ``values``, ``mask``, ``gamma``, ``lam``.

    Returns:
        ``(advantages, returns)``, each ``(B, R)``. ``returns = raw_advantages + values``
        (before whitening; the critic's target). ``advantages`` are the raw advantages
        whitened over every valid token of the batch; they are not zeroed on masked positions
        (losses mask them). With fewer than two valid tokens, advantages are all 0.
    """
    values, rewards, gamma, lam = x.need_values("gae"), x.token_level_rewards, x.gamma, x.lam
    with torch.no_grad():
        valid = x.mask != 0
        next_value = torch.zeros_like(values[:, 0])
        lastgaelam = torch.zeros_like(values[:, 0])
        raw = torch.zeros_like(values)
        for t in reversed(range(values.shape[1])):
            delta = rewards[:, t] + gamma * next_value - values[:, t]
            gae = delta + gamma * lam * lastgaelam
            next_value = torch.where(valid[:, t], values[:, t], next_value)
            lastgaelam = torch.where(valid[:, t], gae, lastgaelam)
            raw[:, t] = lastgaelam
        returns = raw + values
        return _whiten_or_zero(raw, x.mask), returns


@register_estimator("grpo", needs_groups=True, paper="https://arxiv.org/abs/2402.03300")
def compute_grpo(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage (https://arxiv.org/abs/2402.03300).

    ``s = token_level_rewards.sum(-1)``; within each group ``A = (s - mean) / (std + eps)``
    (unbiased std), or ``A = s - mean`` when ``norm_by_std`` is False. A group of one uses
    mean 0 and std 1. Invalid rows are left out of their group's mean and std and get 0.

    Returns:
        ``(advantages, returns)``, both ``A[:, None] * mask``, ``(B, R)``, zero where the mask
        is 0; a group whose valid scores are all equal gets exactly 0.
    """
    groups = x.need_groups("grpo")
    with torch.no_grad():
        scores = x.token_level_rewards.sum(dim=-1)
        size, mean, std = _group_stats(scores, groups, x.valid)
        single = size < 2
        mean = torch.where(single, torch.zeros_like(mean), mean)
        adv = scores.to(torch.float64) - mean
        if x.norm_by_std:
            adv = adv / (torch.where(single, torch.ones_like(std), std) + x.eps)
        out = _per_token(adv, x)
        return out, out


@register_estimator("drgrpo", needs_groups=True, paper="https://arxiv.org/abs/2503.20783")
def compute_drgrpo(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Dr. GRPO (https://arxiv.org/abs/2503.20783): GRPO without the std division, ``s - mean``."""
    return compute_grpo(replace(x, norm_by_std=False))


@register_estimator("rloo", needs_groups=True, paper="https://arxiv.org/abs/2402.14740")
def compute_rloo(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out (https://arxiv.org/abs/2402.14740).

    ``A = s - mean(other scores of the group) = n / (n - 1) * (s - mean_group)`` with
    ``s = token_level_rewards.sum(-1)``; a group of one keeps ``A = s``. Invalid rows are not
    among the "others" and get 0 (``n`` counts the valid rows).

    Returns:
        ``(advantages, returns)``, both ``A[:, None] * mask``, ``(B, R)``.
    """
    groups = x.need_groups("rloo")
    with torch.no_grad():
        scores = x.token_level_rewards.sum(dim=-1)
        size, mean, _ = _group_stats(scores, groups, x.valid)
        s = scores.to(torch.float64)
        scale = size / (size - 1).clamp(min=1)
        out = _per_token(torch.where(size > 1, s * scale - mean * scale, s), x)
        return out, out


@register_estimator("reinforce_pp", paper="https://arxiv.org/abs/2501.03262")
def compute_reinforce_pp(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (https://arxiv.org/abs/2501.03262): whitened discounted returns.

    Reverse over t: ``G = r[t] + gamma * G`` on valid tokens; on masked tokens ``G`` carries
    through unchanged; ``returns[t] = G * mask[t]``.

    Returns:
        ``(advantages, returns)``, each ``(B, R)``: ``advantages = masked_whiten(returns) *
        mask`` (all 0 with fewer than two valid tokens); ``returns`` are zero where masked.
    """
    rewards, gamma = x.token_level_rewards, x.gamma
    with torch.no_grad():
        valid = x.mask != 0
        m = x.mask.to(rewards.dtype)
        running = torch.zeros_like(rewards[:, 0])
        returns = torch.zeros_like(rewards)
        for t in reversed(range(rewards.shape[1])):
            running = torch.where(valid[:, t], rewards[:, t] + gamma * running, running)
            returns[:, t] = running * m[:, t]
        return _whiten_or_zero(returns, m) * m, returns


@register_estimator(
    "reinforce_pp_baseline", needs_groups=True, paper="https://arxiv.org/abs/2501.03262"
)
def compute_reinforce_pp_baseline(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline (https://arxiv.org/abs/2501.03262).

    ``A = s - mean_group`` (a group of one: mean 0) with ``s = token_level_rewards.sum(-1)``,
    broadcast over the mask, then whitened over the batch's valid tokens. Invalid rows are left
    out of the group mean and of the whitening, and get 0.

    Returns:
        ``(advantages, returns)``, equal, ``(B, R)``, zero where masked (all 0 with fewer than
        two valid tokens).
    """
    groups = x.need_groups("reinforce_pp_baseline")
    with torch.no_grad():
        scores = x.token_level_rewards.sum(dim=-1)
        size, mean, _ = _group_stats(scores, groups, x.valid)
        adv = scores.to(torch.float64) - torch.where(size > 1, mean, torch.zeros_like(mean))
        m = x.mask.to(x.token_level_rewards.dtype)
        out = _per_token(adv, x)
        out = _whiten_or_zero(out, m) * m
        return out, out
